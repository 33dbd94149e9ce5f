/*
 * sandbox/pattern: the budgeted string.find/match/gmatch/gsub against Lua
 * 5.4's own. Two states run the same snippets, one with sp_open, and must
 * give the same results and error messages; then random patterns do the
 * same; then a tick that raises stops catastrophic patterns quickly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

#include "pattern.h"
#include "ctest.h"

/* Helpers defined in both states. __ser turns any returns into one string;
   tables and functions show as their type only. */
static const char prelude[] =
  "function __ser(...)\n"
  "  local t, out = table.pack(...), {}\n"
  "  for i = 1, t.n do\n"
  "    local v = t[i]\n"
  "    local ty = math.type(v) or type(v)\n"
  "    if ty == 'string' then out[i] = string.format('%q', v)\n"
  "    elseif ty == 'integer' or ty == 'float' or ty == 'boolean' or ty == 'nil' then\n"
  "      out[i] = ty .. ':' .. tostring(v)\n"
  "    else out[i] = ty end\n"
  "  end\n"
  "  return t.n .. '[' .. table.concat(out, ',') .. ']'\n"
  "end\n"
  "function GM(s, p, init)\n"
  "  local it, out = string.gmatch(s, p, init), {}\n"
  "  for _ = 1, 200 do\n"
  "    local r = table.pack(it())\n"
  "    if r[1] == nil then break end\n"
  "    out[#out + 1] = __ser(table.unpack(r, 1, r.n))\n"
  "  end\n"
  "  return table.concat(out, ';')\n"
  "end\n"
  "local env = setmetatable({F = string.find, M = string.match, G = string.gsub},\n"
  "                         {__index = _G})\n"
  "function __run(code)\n"
  "  local f, err = load(code, '=snippet', 't', env)\n"
  "  if not f then return 'LOAD ' .. err end\n"
  "  return __ser(pcall(f))\n"
  "end\n"
  "local repl_t = setmetatable({}, {__index = function(_, k)\n"
  "  if type(k) == 'string' and #k % 2 == 1 then return '<' .. k .. '>' end\n"
  "  if type(k) == 'number' and k % 3 == 0 then return k * 10 end\n"
  "end})\n"
  "local function repl_f(...)\n"
  "  local t = table.pack(...)\n"
  "  if t.n % 2 == 0 and #tostring(t[1]) % 2 == 0 then return nil end\n"
  "  if t[1] == 'b' then return false end\n"
  "  return '{' .. tostring(t[1]) .. '#' .. t.n .. '}'\n"
  "end\n"
  "function __probe(s, p, init, r)\n"
  "  return table.concat({\n"
  "    __ser(pcall(string.find, s, p, init)),\n"
  "    __ser(pcall(string.find, s, p, init, true)),\n"
  "    __ser(pcall(string.match, s, p, init)),\n"
  "    __ser(pcall(GM, s, p, init)),\n"
  "    __ser(pcall(string.gsub, s, p, r)),\n"
  "    __ser(pcall(string.gsub, s, p, r, 2)),\n"
  "    __ser(pcall(string.gsub, s, p, repl_t)),\n"
  "    __ser(pcall(string.gsub, s, p, repl_f)),\n"
  "  }, ' / ')\n"
  "end\n";

/* Lua chunks; "return " is put in front of those that are expressions. */
static const char *const snippets[] = {
  /* find: plain, init, anchors */
  "F('hello world', 'o')",
  "F('hello world', 'o', 6)",
  "F('hello world', 'l+')",
  "F('hello', '')",
  "F('', '')",
  "F('', 'a')",
  "F('', '.*')",
  "F('hello', 'xyz')",
  "F('hello', 'h', 0)",
  "F('hello', 'o', -1)",
  "F('hello', 'h', -5)",
  "F('hello', 'h', -6)",
  "F('hello', 'l', -100)",
  "F('hello', 'o', 5)",
  "F('hello', '', 6)",
  "F('hello', '', 7)",
  "F('hello', 'o', 100)",
  "F('a.b', '.', 1, true)",
  "F('a.b', '%.')",
  "F('a+b', '+', 1, true)",
  "F('a+b', 'a+b')",
  "F('a+b', 'a+b', 1, true)",
  "F('abc', 'b', nil, true)",
  "F('abc', 'b', 1, 0)",
  "F('abc', 'b', 1, false)",
  "F('a.c', '.', 1, nil)",
  "F('abc', 'c', 4)",
  "F('abc', '', 4)",
  "F('abc', '', 5)",
  "F('abc', 'a', math.mininteger)",
  "F('abc', 'a', math.maxinteger)",
  "F('abc', 'c', '2')",
  "F('abc', 'c', 2.0)",
  "F('abc', 'c', '2.0')",
  "F('abc', 'c', 'x')",
  "F('abc', 'c', 1.5)",
  "F('abc', '^b')",
  "F('abc', '^a')",
  "F('^abc', '^^a')",
  "F('abc', 'c$')",
  "F('abc', 'b$')",
  "F('a$c', '$c')",
  "F('a$', 'a$$')",
  "F('abc', '^', 2)",
  "F('abc', '^b', 2)",
  "F('abc', '^abc$')",
  "F('abcd', '^abc$')",
  "F('', '^$')",
  "F('', '$')",
  "F('x', '^$')",
  "F('abc', '$')",
  "F('abc', '^', 10)",
  "F(12345, 3)",
  "F(12345, '%d', 2)",
  "F(1.5, '.', 1, true)",
  "F('aaa', 'a-')",
  "F('aaa', 'a-$')",
  "F('aaab', 'a-b')",
  "F('aaa', 'a*')",
  "F('aaa', 'a+')",
  "F('', 'a+')",
  "F('baaa', 'a?a')",
  "F('b', 'a?b')",
  "F('a', '*')",
  "F('*a', '*a')",
  "F('a', '.-$')",
  "F('abc', '(b)')",
  "F('abc', '()')",
  "F('abc', '(b)()')",
  "F('aXbaXb', '(a(X)b)%1')",
  "F(('a'):rep(1000) .. 'b', 'a*b')",
  "F(('a'):rep(10), ('a*'):rep(10) .. 'b')",
  "F(('ab'):rep(50), '(ab)(ab)%2%1', 7)",
  /* NUL bytes */
  "F('a\\0b', '\\0')",
  "F('a\\0b', '%z')",
  "F('a\\0b\\0', '[\\0]', 3)",
  "F('a\\0b', 'a%zb')",
  "F('a\\0b', '.', 2)",
  "F('a\\0b\\0c', 'b\\0c')",
  "F('a\\0b', '[\\0-a]+')",
  "M('a\\0\\0b', '\\0+')",
  "G('a\\0b\\0c', '\\0', '-')",
  "F('a\\0b', '%z', 1, true)",
  "F('\\0', '\\0', 1, true)",
  "F('a\\0b', 'a\\0', 1)",
  "F('a\\0.b', '\\0.', 1, true)",
  "F('a\\0xb', '\\0.')",
  "M('x\\0\\0y', '%b\\0\\0')",
  "M('a\\0b', '%Z+')",
  "M('\\0', '[%z]')",
  "M('a', '[%Z]')",
  "G('a\\0b', '%z', 'Z')",
  "G('a\\0b', '\\0', '%%')",
  "G('a\\0b', '.', '%0\\0')",
  "M('a\\0', '(.)\\0$')",
  /* classes and escapes */
  "M('a%b', '%%')",
  "M('a.b', '%.')",
  "M('[x]', '%[(.)%]')",
  "M('a-b', '%-')",
  "M('x', '%x')",
  "M('a+b', 'a%+b')",
  "M('$', '%$')",
  "M('^', '%^')",
  "M('(', '%(')",
  "M(')', '%)')",
  "M('a', '%a%')",
  "M('abc', '.')",
  "M('\\n', '.')",
  "M('abc', '..')",
  "M('a', '...')",
  "M('  x  ', '%s*()')",
  "M('Hello World', '%u%l+')",
  "M('Hello World', '%U+')",
  "M('a1_B2', '%w+')",
  "M('a1_B2', '%W')",
  "M('0x1F', '%x+', 3)",
  "M('\\1\\2a', '%c+')",
  "M('a!?b', '%p+')",
  "M(' \\t\\n\\vx', '%s+')",
  "M('\\127abc', '%g+')",
  "M('12ab', '%D+')",
  /* sets */
  "M('hello123', '[0-9]+')",
  "M('hello123', '[^a-z]+')",
  "M('abc]', '[]]')",
  "M('abc]', '[^]]+')",
  "M('a-b', '[a-]+')",
  "M('a-z', '[%-z]+')",
  "M('x^y', '[x^]+')",
  "M('^x', '[^^]')",
  "M('abc', '[%a]+')",
  "M('ab12', '[%d%a]+')",
  "M('AB12', '[%l%d]+')",
  "M(']', '[]')",
  "M('a', '[a')",
  "M('a', '[^')",
  "M('a', '[')",
  "M('a', '[%')",
  "M('a', '[%]')",
  "M('a', '[a-')",
  "M('a-', '[a-]')",
  "M('b', '[a-c]')",
  "M('b', '[c-a]')",
  "M('%', '[%%]')",
  "M('\\233t\\233', '[\\128-\\255]+')",
  "M('a]', '[]a]+')",
  "M('x', '[^]x]')",
  "M(']', '[^]x]')",
  "M('a-z', '[a%-z]+')",
  "M('\\\\', '[\\\\]')",
  "M('g', '[%x]')",
  "M('a-%]', '[a-%]]+')",
  "M('aabb', '[ab]-b')",
  "M('aabb', '[ab]*')",
  "M('aabb', '[ab]+$')",
  "M('aabb', '[ab]?')",
  "M('x', '[^%a]')",
  "M('-', '[%a-]')",
  "M('b', '[%a-c]')",
  "M(']]]', '[]]+')",
  "M('^^', '[^^^]')",
  /* captures */
  "M('hello world', '(%w+) (%w+)')",
  "M('key=val', '(%w+)=(%w+)')",
  "M('abc', '()b()')",
  "M('abc', '()')",
  "M('abc', '(a)(b)(c)')",
  "M('abc', '((a)(b))')",
  "M('abc', '(a(b(c)))')",
  "M('abc', '(')",
  "M('abc', 'a)')",
  "M('abc', '(()')",
  "M('', '()')",
  "M('', '(.-)')",
  "M('abc', '(.-)$')",
  "M('abc', '(.*)c')",
  "M('abc', 'c()$')",
  "M('abc', '()*')",
  "M('a*', '()*')",
  "M('aa*', '(a)*')",
  "M('abc', '(a)?')",
  "M('ab', '()(a)()')",
  "M('  trim  ', '^%s*(.-)%s*$')",
  "M('2024-01-05', '(%d+)-(%d+)-(%d+)')",
  "M('x = 10', '^(%w+)%s*=%s*(%d+)$')",
  "M('/usr/local/bin', '.*/(.*)')",
  "M('file.tar.gz', '^(.-)%.(.*)$')",
  "M('file.tar.gz', '^(.*)%.(.-)$')",
  "M(('a'):rep(40), ('(a)'):rep(32))",
  "M(('a'):rep(40), ('(a)'):rep(33))",
  "M('a', ('()'):rep(32))",
  "M('a', ('()'):rep(33))",
  "F(('a'):rep(40), ('(a)'):rep(32))",
  "M('abc', 'a(b')",
  "F('abc', '(b')",
  "M('abc', ')')",
  "F('abc', '%)')",
  /* back-references */
  "M('abab', '(ab)%1')",
  "M('abcab', '(ab)c%1')",
  "M('aa', '(a)%1')",
  "M('ab', '(a)%1')",
  "M('say \"hi\" now', '([\"\\'])(.-)%1')",
  "M('abc', '%1')",
  "M('abc', '(a)%2')",
  "M('abc', '(a%1)')",
  "M('abc', '%0')",
  "M('aa', '()a%1')",
  "M('abab', '(a)(b)%1%2')",
  "M('a', '(a)%9')",
  "M('xyzy', '(x(y)z)%2')",
  "M('aaaa', '(a*)%1$')",
  "M('abcabc', '^(.-)%1$')",
  /* %b */
  "M('x(a(b)c)y', '%b()')",
  "M('((', '%b()')",
  "M('())', '%b()')",
  "M('[[x]]', '%b[]')",
  "M('\"a\"b\"', '%b\"\"')",
  "M('abab', '%baa')",
  "M('a', '%b')",
  "M('a', '%ba')",
  "M('a(b', '%b()')",
  "M('(x)(y)', '%b()%b()')",
  "M('x', '%bxx')",
  "M('xax', '%bxx')",
  "G('f(a(b)) g(c)', '%b()', '[]')",
  "M('(a)', '%b()*')",
  "M('((a)', '%b()', 2)",
  "F('(())', '%b()$')",
  /* %f */
  "G('THE (quick) fox', '%f[%a]%a+', 'W')",
  "F('hello', '%f[%a]')",
  "F('hello', '%f[%A]')",
  "F('hello', '%f[^%a]')",
  "M('aaa', '()%f[a]')",
  "F('', '%f[%z]')",
  "F('abc', '%f[%z]')",
  "F('abc', '%f[%Z]')",
  "F(' x', '%f[%w]')",
  "F('a', '%f')",
  "F('a', '%fa')",
  "F('a', '%f[')",
  "F('a', '%f[a')",
  "GM('the cat in the hat', '%f[%w]%w+')",
  "GM('THE (quick) fox', '%f[%a]()')",
  "F('ab', '%f[b]')",
  "F('x', '%f[^x]')",
  /* errors from the matcher, with the position prefix */
  "M('a', '%')",
  "string.find('a', '%')",
  "string.match('a', '[a')",
  "string.gsub('a', '%f', 'x')",
  "string.find('a', '%b')",
  "string.find('abc', '%2')",
  "string.find('abc', ')')",
  "string.find('abc', 'a)')",
  "string.match('abc', '(')",
  "string.gsub('abc', '(', '%1')",
  "local n = 0 for w in string.gmatch('abc', '%') do n = n + 1 end return n",
  "local n = 0 for w in string.gmatch('abc', '(') do n = n + 1 end return n",
  "('abc'):gsub('.', '%2')",
  "('abc'):gsub('.', '%')",
  "string.find('abc', ('()'):rep(40))",
  "M(('a'):rep(300), ('a?'):rep(199))",
  "M(('a'):rep(300), ('a?'):rep(200))",
  "M(('a'):rep(199), ('a?'):rep(199) .. '$')",
  "F(('a'):rep(300), ('a?'):rep(150) .. ('(a?)'):rep(30))",
  "F(('a'):rep(300), ('a?'):rep(150) .. ('(a?)'):rep(32) .. ('a?'):rep(30))",
  "M('', ('a?'):rep(300))",
  "M(('a'):rep(10), ('a?'):rep(300))",
  "M('b', ('a?'):rep(300))",
  "F(('ab'):rep(200), ('a?b?'):rep(110))",
  "M(('x'):rep(300), ('x-'):rep(250) .. '$')",
  "G(('a'):rep(300), ('a?'):rep(200), 'x')",
  "GM(('a'):rep(300), ('a?'):rep(200))",
  /* argument errors */
  "pcall(string.find)",
  "pcall(string.find, 'a')",
  "pcall(string.find, {}, 'a')",
  "pcall(string.match, 'a', {})",
  "pcall(string.find, 'a', 'a', {})",
  "pcall(string.gsub, 'a', 'a', 'b', {})",
  "pcall(string.gsub, 'a', 'a')",
  "pcall(string.gsub, 'a', 'a', true)",
  "pcall(string.gsub, 'a', 'a', nil)",
  "pcall(string.gsub, 'abc', 'b', {}, 'x')",
  "pcall(string.gmatch)",
  "pcall(string.gmatch, 'abc')",
  "pcall(string.gmatch, 'abc', '.', 'x')",
  "string.find()",
  "('x'):find()",
  "string.gsub('x', 'x')",
  "string.match(nil, 'x')",
  "F('abc', 'b', 1.5)",
  "G('abc', '.', 'x', 1.5)",
  "pcall(string.gsub, 'abc', '%w', setmetatable({}, {__index = function() return {} end}))",
  /* gsub */
  "G('hello world', 'o', '0')",
  "G('hello', '', '-')",
  "G('', '', '-')",
  "G('abc', '^', '>')",
  "G('abc', '$', '<')",
  "G('abc', '^a', 'A')",
  "G('aaa', '^a', 'b')",
  "G('abc', '^x', 'b')",
  "G('abc', '^', '>', 0)",
  "G('abc', '%w', '%0%0')",
  "G('abc', '%w', '%1')",
  "G('abc', '(%w)', '%1-')",
  "G('abc', '(%w)', '%2')",
  "G('abc', '%w', '%%')",
  "G('abc', '%w', '%')",
  "G('abc', '%w', 'x%')",
  "G('abc', '%w', '%x')",
  "G('abc', 'b', '%0%0%0')",
  "G('hello world', '(%w+)', '<%1>')",
  "G('hello world', '%w+', '%0 %0', 1)",
  "G('abc', '.', 'x', 0)",
  "G('abc', '.', 'x', -1)",
  "G('abc', '.', 'x', 2)",
  "G('abc', '.', 'x', 100)",
  "G('abc', '.', 'x', 2.0)",
  "G('abc', '.', 'x', '2')",
  "G('abc', '.', 'x', math.mininteger)",
  "G('abc', '.', 'x', math.maxinteger)",
  "G('abc', '.', 5)",
  "G('abc', '.', 1.5)",
  "G('abc', '.', -0.0)",
  "G('abc', 'b*', '-')",
  "G('abc', 'x*', '-')",
  "G('a,b,,c', ',', ';')",
  "G('abc', '', '')",
  "G('abc', '()', '%1')",
  "G('abc', '()b', '%1')",
  "G('abc', '(b)', '%0%1')",
  "G('abc', '(a)(b)(c)', '%3%2%1')",
  "G('abc', '(a)(b)(c)', '%4')",
  "G('abc', 'b', '%9')",
  "G('abc', '(b)', '%1%%%0')",
  "G('one two  three', '%s+', ' ')",
  "G(123, 2, 9)",
  "G('abc', 'b()', '[%1]')",
  "G('abc', 'b', 'x', 1.0)",
  "G('hello world', 'l+', function(s) return #s end)",
  "G('aaa', 'a-', '-')",
  "G('abc', '.-', '-')",
  "G('abc', 'a?', '-')",
  "G('abab', '^ab', '-')",
  "G('ab\\0ab', 'b', '%0%0')",
  "G('x', '^$', 'y')",
  "G('', '^$', 'y')",
  "G('', '$', 'y')",
  "G('abc', '%f[%w]', '|')",
  "G('abc', '(', 'x')",
  "G(('abc'):rep(100), 'b', 'x')",
  "G('abc', '%w', '%0', 2.0)",
  /* gsub with a table */
  "G('$name is $age', '%$(%w+)', {name = 'Bob', age = 42})",
  "G('$x', '%$(%w+)', {x = false})",
  "G('$x', '%$(%w+)', {x = true})",
  "G('$x', '%$(%w+)', {x = {}})",
  "G('abc', '%w', {a = 1, b = 2.5})",
  "G('abc', '()', {[1] = 'one', [4] = 'four'})",
  "G('abc', '%w', setmetatable({}, {__index = function(t, k) return k:upper() end}))",
  "G('abc', '(a)(b)', {a = 'A'})",
  "G('abc', '%w', {})",
  "G('abc', 'x*', {[''] = '.'})",
  /* gsub with a function */
  "G('abc', '%w', string.upper)",
  "G('abc', '(%w)', function(c) return c .. c end)",
  "G('abc', '%w', function() end)",
  "G('abc', '%w', function() return false end)",
  "G('abc', '%w', function() return {} end)",
  "G('abc', '%w', function() return true end)",
  "G('abc', '(a)(b)', function(a, b) return b .. a end)",
  "G('abc', '()', function(p) return p end)",
  "G('hello', '', function() return '.' end)",
  "G('abc', '%w', function() error('boom') end)",
  "G('abc', '%w', function() error({}) end)",
  "G('abc', '%w', function() error('boom', 0) end)",
  "G('abc', '%w', function(c) return (G(c, '.', '%0%0')) end)",
  "local n = 0 G(('x'):rep(10), 'x', function() n = n + 1 end) return n",
  "local n = 0 G(('x'):rep(10), 'x', function() n = n + 1 end, 3) return n",
  "G('abc', '%w', function(...) return select('#', ...) end)",
  "G('abc', '(.)(.)', function(...) return select('#', ...) end)",
  "local co = coroutine.create(function() return G('a', 'a', function() coroutine.yield() end) end) return coroutine.resume(co)",
  "G('a b', '%w', function(w) return F(w, '%w') end)",
  /* gmatch */
  "GM('hello world from lua', '%a+')",
  "GM('k1=v1, k2=v2', '(%w+)=(%w+)')",
  "GM('abc', '')",
  "GM('', '')",
  "GM('abc', '.', 2)",
  "GM('abc', '.', -1)",
  "GM('abc', '.', 10)",
  "GM('abc', '()', -10)",
  "GM('abc', '', 4)",
  "GM('abc', '', 5)",
  "GM('abc', '.', math.maxinteger)",
  "GM('abc', '.', math.mininteger)",
  "GM('abc', 'b*')",
  "GM('^a^a', '^a')",
  "GM('aaa', '^a')",
  "GM('a,b,,c', '([^,]*)')",
  "GM('abc', '()(.)')",
  "GM(12345, '%d%d')",
  "GM('abc', '()', 2)",
  "GM('aaa', 'a-')",
  "GM('aaa', 'a*$')",
  "GM('ab', '.-$')",
  "GM('a1b22c333', '%d+')",
  "GM('one two', '(%w+)()')",
  "GM('abc', '%1')",
  "local it = string.gmatch('ab', '.') return it(), it(), it(), it()",
  "local it = string.gmatch('abc', '.') local co = coroutine.wrap(function() return it() end) return co(), it()",
  "local t = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[#t + 1] = k .. v end return table.concat(t)",
  "local it = string.gmatch('abc', '%') return pcall(it)",
  /* methods on strings */
  "('hello'):find('l')",
  "('x'):rep(3):gsub('x', 'y')",
  "('abc'):match('b')",
  "local t = {} for c in ('abc'):gmatch('.') do t[#t + 1] = c end return table.concat(t, ',')",
  "local s = 'abc' return s:find('b', 1, true)",
  /* init values -100..100 */
  "local t = {} for i = -100, 100 do t[#t + 1] = __ser(F('hello', 'l', i)) end return table.concat(t, ';')",
  "local t = {} for i = -100, 100 do t[#t + 1] = __ser(F('hello', 'l', i, true)) end return table.concat(t, ';')",
  "local t = {} for i = -100, 100 do t[#t + 1] = __ser(F('hello', '', i)) end return table.concat(t, ';')",
  "local t = {} for i = -100, 100 do t[#t + 1] = __ser(M('hello', '(.)()', i)) end return table.concat(t, ';')",
  "local t = {} for i = -100, 100 do t[#t + 1] = __ser(M('hello', '^.', i)) end return table.concat(t, ';')",
  "local t = {} for i = -100, 100 do t[#t + 1] = GM('hello', 'l*', i) end return table.concat(t, ';')",
  "local t = {} for i = -100, 100 do t[#t + 1] = GM('', '', i) end return table.concat(t, ';')",
  "local t = {} for i = -100, 100 do t[#t + 1] = __ser(G('hello', 'l', 'L', i)) end return table.concat(t, ';')",
  /* UTF-8 and high bytes */
  "M('h\\195\\169llo', '[\\128-\\191]')",
  "G('h\\195\\169llo', '[\\192-\\255][\\128-\\191]*', '?')",
  "M('\\255\\254', '[\\254-\\255]+')",
  "GM('\\200a\\201', '%A')",
};

/* Expected results of our functions for a few snippets, in __ser's form,
   so the differential test cannot pass by comparing Lua with itself. */
static const struct {
  const char *code, *expected;
} known[] = {
  {"F('hello world', 'o', 6)", "3[boolean:true,integer:8,integer:8]"},
  {"M('key=val', '(%w+)=(%w+)')", "3[boolean:true,\"key\",\"val\"]"},
  {"G('hello', '', '-')", "3[boolean:true,\"-h-e-l-l-o-\",integer:6]"},
  {"GM('^a^a', '^a')", "2[boolean:true,\"1[\\\"^a\\\"];1[\\\"^a\\\"]\"]"},
  {"M('abc', '()b()')", "3[boolean:true,integer:2,integer:3]"},
  {"M('x(a(b)c)y', '%b()')", "2[boolean:true,\"(a(b)c)\"]"},
  {"M('a', '%')", "2[boolean:false,\"snippet:1: malformed pattern (ends with '%')\"]"},
  {"M(('a'):rep(300), ('a?'):rep(200))", "2[boolean:false,\"snippet:1: pattern too complex\"]"},
  {"G('abc', '%w', '%2')", "2[boolean:false,\"snippet:1: invalid capture index %2\"]"},
  {"G('$x', '%$(%w+)', {x = true})", "2[boolean:false,\"snippet:1: invalid replacement value (a boolean)\"]"},
  {"M('a', ('()'):rep(33))", "2[boolean:false,\"snippet:1: too many captures\"]"},
  {"GM('abc', '')", "2[boolean:true,\"1[\\\"\\\"];1[\\\"\\\"];1[\\\"\\\"];1[\\\"\\\"]\"]"},
};

static lua_State *new_state(int ours) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (ours) sp_open(L);
  if (luaL_dostring(L, prelude) != LUA_OK) {
    fprintf(stderr, "prelude: %s\n", lua_tostring(L, -1));
    exit(2);
  }
  return L;
}

/* Runs a chunk through __run; the result is copied into out. */
static void run(lua_State *L, const char *code, char *out, size_t outlen) {
  char buf[4096];
  const char *src = code;
  if (strncmp(code, "local ", 6) != 0 && strncmp(code, "for ", 4) != 0 &&
      strncmp(code, "return ", 7) != 0) {
    snprintf(buf, sizeof buf, "return %s", code);
    src = buf;
  }
  lua_getglobal(L, "__run");
  lua_pushstring(L, src);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK)
    snprintf(out, outlen, "HOST %s", lua_tostring(L, -1));
  else
    snprintf(out, outlen, "%s", lua_tostring(L, -1));
  lua_pop(L, 1);
}

static char res_a[1 << 16], res_b[1 << 16];

static void test_snippets(lua_State *orig, lua_State *ours) {
  size_t i;
  for (i = 0; i < sizeof snippets / sizeof *snippets; i++) {
    if (getenv("SP_VERBOSE")) fprintf(stderr, "> %s\n", snippets[i]);
    run(orig, snippets[i], res_a, sizeof res_a);
    run(ours, snippets[i], res_b, sizeof res_b);
    CT_CHECK(strcmp(res_a, res_b) == 0, "%s\n  lua:  %s\n  ours: %s",
             snippets[i], res_a, res_b);
  }
  for (i = 0; i < sizeof known / sizeof *known; i++) {
    run(ours, known[i].code, res_b, sizeof res_b);
    CT_CHECK(strcmp(known[i].expected, res_b) == 0, "%s\n  expected: %s\n  ours:     %s",
             known[i].code, known[i].expected, res_b);
  }
}

/* Every class, and its complement, over all 256 bytes; in sets too. */
static void test_classes(lua_State *orig, lua_State *ours) {
  static const char classes[] = "acdglpsuwxzACDGLPSUWXZ";
  char code[512];
  size_t i;
  for (i = 0; classes[i]; i++) {
    snprintf(code, sizeof code,
             "local t = {} for i = 0, 255 do t[#t + 1] = string.char(i) end "
             "local s = table.concat(t) "
             "return G(s, '%%%c', ''), G(s, '[%%%c]', ''), G(s, '[^%%%c_]+', '.'), "
             "M(s, '%%%c+', 20), F(s, '%%f[%%%c]', 2)",
             classes[i], classes[i], classes[i], classes[i], classes[i]);
    run(orig, code, res_a, sizeof res_a);
    run(ours, code, res_b, sizeof res_b);
    CT_CHECK(strcmp(res_a, res_b) == 0, "class %%%c\n  lua:  %s\n  ours: %s",
             classes[i], res_a, res_b);
  }
}

/* The functions in `string` (and so behind s:find) are ours: C closures
   carrying the tick box. */
static void test_installed(lua_State *orig, lua_State *ours) {
  static const char code[] =
    "local n = 0 "
    "for _, f in ipairs({string.find, string.match, string.gmatch, string.gsub, "
    "                    ('').find, ('').gsub, package.loaded.string.match}) do "
    "  if debug.getupvalue(f, 1) == '' then n = n + 1 end "
    "end return n";
  run(ours, code, res_b, sizeof res_b);
  CT_EQ_STR("2[boolean:true,integer:7]", res_b);
  run(orig, code, res_a, sizeof res_a);
  CT_EQ_STR("2[boolean:true,integer:0]", res_a);
}

static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;

static unsigned rnd(unsigned n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (unsigned)(rng_state >> 33) % n;
}

static const char *const tokens[] = {
  "a", "b", "c", "x", ".", "%a", "%d", "%s", "%w", "%A", "%p", "%%", "%.",
  "[ab]", "[^a]", "[a-c]", "[%d]", "[]]", "[^]a]", "[%a(]", "*", "+", "-",
  "?", "(", ")", "()", "%1", "%2", "%0", "%b()", "%bab", "%baa", "%f[a]",
  "%f[%w]", "%f[^a]", "%f[%z]", "^", "$", "%", "[", "]", "\0", "%z", "(a)",
  "(.-)", "1", "(%w+)", "a*", "b-", ".?", "(b*)", "%)",
};
static const char subject_chars[] = "aabbc()x1 .%^$]\0";
static const char *const replacements[] = {
  "x", "%0", "%1", "%2", "<%1|%0>", "%%", "%", "%x", "", "()", "%1%1", "-%3-",
};

static size_t random_pattern(char *p) {
  size_t n = 0, k, count = 1 + rnd(8);
  for (k = 0; k < count; k++) {
    const char *t = tokens[rnd(sizeof tokens / sizeof *tokens)];
    size_t tl = t[0] ? strlen(t) : 1;   /* the "\0" token is one NUL byte */
    memcpy(p + n, t, tl);
    n += tl;
  }
  return n;
}

static void probe(lua_State *L, const char *s, size_t ls, const char *p,
                  size_t lp, int init, const char *r, char *out, size_t outlen) {
  lua_getglobal(L, "__probe");
  lua_pushlstring(L, s, ls);
  lua_pushlstring(L, p, lp);
  if (init == 0) lua_pushnil(L);
  else lua_pushinteger(L, init);
  lua_pushstring(L, r);
  if (lua_pcall(L, 4, 1, 0) != LUA_OK)
    snprintf(out, outlen, "HOST %s", lua_tostring(L, -1));
  else
    snprintf(out, outlen, "%s", lua_tostring(L, -1));
  lua_pop(L, 1);
}

static void test_random(lua_State *orig, lua_State *ours, int count) {
  int i, failures = 0;
  char p[128], s[16];
  for (i = 0; i < count; i++) {
    size_t lp = random_pattern(p), ls = rnd(13), k;
    int init = rnd(4) == 0 ? 0 : (int)rnd(31) - 15;
    const char *r = replacements[rnd(sizeof replacements / sizeof *replacements)];
    for (k = 0; k < ls; k++) s[k] = subject_chars[rnd(sizeof subject_chars)];
    probe(orig, s, ls, p, lp, init, r, res_a, sizeof res_a);
    probe(ours, s, ls, p, lp, init, r, res_b, sizeof res_b);
    if (strcmp(res_a, res_b) != 0 && failures++ < 10)
      CT_CHECK(0, "random case %d: pattern %.*s\n  lua:  %s\n  ours: %s",
               i, (int)lp, p, res_a, res_b);
  }
  CT_CHECK(failures == 0, "%d of %d random cases differ", failures, count);
}

static long tick_calls, tick_limit;
static lua_State *tick_thread;

static void test_tick(lua_State *L) {
  tick_calls++;
  tick_thread = L;
  if (tick_limit && tick_calls >= tick_limit) {
    lua_pushliteral(L, "budget exceeded");
    lua_error(L);
  }
}

/* Hostile calls, each of which would run for minutes (or hours) unbudgeted. */
static const char *const hostile[] = {
  "string.find(('a'):rep(40), ('a*'):rep(40) .. 'b')",
  "string.match(('a'):rep(40), ('a*'):rep(40) .. 'b')",
  "string.gsub(('a'):rep(40), ('a*'):rep(40) .. 'b', 'x')",
  "for m in string.gmatch(('a'):rep(40), ('a*'):rep(40) .. 'b') do end",
  "('a'):rep(40):find(('a-'):rep(40) .. 'b')",
  "string.find(('a'):rep(40), ('.?'):rep(40) .. ('a'):rep(40) .. 'b')",
  "string.find(('('):rep(300000), '%b()')",
  "string.find(('a'):rep(2000000), ('a'):rep(100000) .. 'b', 1, true)",
  "string.find(('a'):rep(200000), ('a'):rep(50000) .. '.b')",
  "string.find(('a'):rep(20000), '(.*)%1x')",
  "string.find(('a'):rep(200000), '[' .. ('b'):rep(200000) .. ']')",
  "string.gsub(('x'):rep(200000), '', ('%0'):rep(100000))",
  "string.gsub(('a'):rep(40), ('a*'):rep(40) .. 'b', function() end)",
};

static void test_budget(lua_State *ours) {
  size_t i;
  sp_set_tick(ours, test_tick);
  /* what stops them is the tick count, not a clock: the wall-clock bound
     is spec/14's, with the real deadline */
  for (i = 0; i < sizeof hostile / sizeof *hostile; i++) {
    tick_calls = 0;
    tick_limit = 2000;   /* about 2 million steps */
    run(ours, hostile[i], res_b, sizeof res_b);
    CT_CHECK(strcmp(res_b, "2[boolean:false,\"budget exceeded\"]") == 0,
             "%s: %s", hostile[i], res_b);
  }
  tick_limit = 0;
  /* after a stop, the state is still good */
  run(ours, "M('hello', '(h)(.)')", res_b, sizeof res_b);
  CT_EQ_STR("3[boolean:true,\"h\",\"e\"]", res_b);
}

/* The tick runs in all four functions, on the running thread, and not at
   all once removed. */
static void test_tick_calls(lua_State *ours) {
  static const char *const ordinary[] = {
    "F(('a'):rep(100000), 'b$')",
    "M(('a'):rep(3000), '.-b')",           /* quadratic: 4.5 million steps */
    "GM(('a'):rep(100000), 'b')",
    "G(('a'):rep(100000), 'a', 'b')",
    "G(('a'):rep(100000), '', '')",
    "F(('a'):rep(100000), ('a'):rep(100) .. 'b', 1, true)",
  };
  size_t i;
  lua_State *co;
  sp_set_tick(ours, test_tick);
  tick_limit = 0;
  for (i = 0; i < sizeof ordinary / sizeof *ordinary; i++) {
    tick_calls = 0;
    run(ours, ordinary[i], res_b, sizeof res_b);
    CT_CHECK(tick_calls >= 50, "%s: %ld ticks", ordinary[i], tick_calls);
    CT_CHECK(strncmp(res_b + 1, "[boolean:true,", 14) == 0, "%s: %.80s", ordinary[i], res_b);
  }
  /* inside a coroutine the tick gets the coroutine */
  co = lua_newthread(ours);
  luaL_loadstring(co, "return string.find(('a'):rep(100000), 'b$')");
  tick_thread = NULL;
  {
    int nres;
    CT_CHECK(lua_resume(co, ours, 0, &nres) == LUA_OK, "resume");
    lua_pop(co, nres);
  }
  CT_CHECK(tick_thread == co, "tick ran on %p, not the coroutine %p",
           (void *)tick_thread, (void *)co);
  lua_pop(ours, 1);
  /* a gmatch iterator stopped by the tick can be called again */
  CT_CHECK(luaL_dostring(ours, "IT = string.gmatch(('a'):rep(20) .. 'cab', ('a*'):rep(6) .. 'b')") == LUA_OK,
           "%s", lua_tostring(ours, -1));
  tick_calls = 0;
  tick_limit = 100;
  run(ours, "IT()", res_b, sizeof res_b);
  CT_EQ_STR("2[boolean:false,\"budget exceeded\"]", res_b);
  tick_limit = 0;
  run(ours, "#IT(), IT()", res_b, sizeof res_b);
  CT_EQ_STR("2[boolean:true,integer:2]", res_b);
  /* removed */
  sp_set_tick(ours, NULL);
  tick_calls = 0;
  run(ours, "F(('a'):rep(100000), 'b$')", res_b, sizeof res_b);
  CT_CHECK(tick_calls == 0, "%ld ticks after removal", tick_calls);
}

/* A host that never called sp_set_tick: no tick, results as usual; and a
   second sp_open keeps one tick box. */
static void test_no_tick(void) {
  lua_State *L = new_state(1);
  sp_open(L);
  tick_calls = 0;
  run(L, "G(('ab'):rep(10000), '(a)(b)', '%2%1')", res_b, sizeof res_b);
  CT_CHECK(strncmp(res_b, "3[boolean:true,\"baba", 20) == 0, "%.60s", res_b);
  CT_CHECK(tick_calls == 0, "%ld ticks without a tick set", tick_calls);
  sp_set_tick(L, test_tick);
  run(L, "F(('a'):rep(100000), 'b$')", res_b, sizeof res_b);
  CT_CHECK(tick_calls > 0, "tick set after a double sp_open is not called");
  CT_EQ_STR("2[boolean:true,nil:nil]", res_b);
  lua_close(L);
}

int main(int argc, char **argv) {
  int random_count = argc > 1 ? atoi(argv[1]) : 20000;
  lua_State *orig = new_state(0), *ours = new_state(1);
  test_installed(orig, ours);
  test_snippets(orig, ours);
  test_classes(orig, ours);
  test_random(orig, ours, random_count);
  test_budget(ours);
  test_tick_calls(ours);
  test_no_tick();
  lua_close(orig);
  lua_close(ours);
  return ct_finish("pattern");
}
