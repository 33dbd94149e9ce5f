// What the Node sides of bench/*/ share: the directory of JSON files that
// run.lua passes them, and bench/common.lua's timing protocol, in wall time.
// A script in bench/<name>/ loads it with require('../common').
'use strict';

const fs = require('fs');
const path = require('path');

const RUNS = 7;
const RUN_SECONDS = 0.3;
const CALIBRATE_SECONDS = 0.05;

// Wall time and process CPU time of all runs: a share well under 1
// means the machine was busy and the (wall-clock) rates are low.
let wallTotal = 0;
let cpuTotal = 0;

// The directory named by the one argument; without it, the usage and exit 2.
function dataDir(script) {
  const dir = process.argv[2];
  if (!dir) {
    console.error(`usage: node ${script} DIR`);
    process.exit(2);
  }
  return dir;
}

function readJSON(dir, file) {
  return JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
}

async function run(loop, n) {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const passed = await loop(n);
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(c0);
  wallTotal += wall;
  cpuTotal += (cpu.user + cpu.system) / 1e6;
  return [wall, passed];
}

// loop(n) makes n calls and returns (or resolves to) how many passed. Resolves
// to calls per second, the median of RUNS runs of about RUN_SECONDS each;
// check(passed, n) sees every one of those runs.
async function measure(loop, check) {
  let n = 1;
  let elapsed;
  for (;;) {
    elapsed = (await run(loop, n))[0];
    if (elapsed >= CALIBRATE_SECONDS) break;
    n *= 2;
  }
  n = Math.max(1, Math.floor((n * RUN_SECONDS) / elapsed));
  const rates = [];
  for (let i = 0; i < RUNS; i++) {
    const [t, passed] = await run(loop, n);
    check(passed, n);
    rates.push(n / t);
  }
  rates.sort((a, b) => a - b);
  return rates[(RUNS - 1) / 2];
}

// Process CPU seconds per wall second over all runs so far, as printed.
function cpuShare() {
  return wallTotal > 0 ? (cpuTotal / wallTotal).toFixed(2) : '?';
}

module.exports = { dataDir, readJSON, measure, cpuShare };
