// Preloaded into a server from npm that listens on every interface
// (server-everything's streamableHttp): makes it listen on 127.0.0.1 only,
// on the port asked for (0: a free one), and print its URL on stdout, for
// spec/43. node --require ./loopback.cjs SERVER ARGS...
const http = require("node:http");
const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (port, ...rest) {
  const cb = rest.find((a) => typeof a === "function");
  this.once("listening", () => console.log(`listening http://127.0.0.1:${this.address().port}/mcp`));
  return listen.call(this, Number(port) || 0, "127.0.0.1", cb);
};
