// tiktoken-ref.cjs: the reference side of the tokenizer checks and benchmark (node).
//
// Needs tiktoken's JS ports installed in a scratch folder: NODE_PATH=<dir>/node_modules
// with js-tiktoken (pure JS) and, when it installs, tiktoken (the Rust crate as WASM).
//
//   node tiktoken-ref.cjs export DIR            write DIR/tiktoken.model from o200k_base
//   node tiktoken-ref.cjs encode IMPL PAT FILE  ids of FILE (one line, spaces);
//                                               IMPL = wasm | js, PAT = o200k | kimi
//   node tiktoken-ref.cjs bench IMPL PAT FILE   MB/s encoding FILE (wall, best of 5)
//
// js-tiktoken ships the ranks as "! 0 tok tok ..." (base64 tokens from a start rank);
// decoding that gives the rank table. The kimi pattern is expressed for each engine:
// Rust (WASM) takes the release's pattern as is; JS spells the class intersection with
// a lookahead and (?i:'s|...) as classes, with U+017F in the s class as Rust's case
// folding has it. Known JS-port difference: its \s has U+FEFF and lacks U+0085.
"use strict";
const fs = require("fs");

const KIMI_RUST =
  "[\\p{Han}]+" +
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?" +
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?" +
  "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const CONTR = "(?:'(?:[sS\\u017F]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))?";
// js-tiktoken compiles pat_str with the u flag, where "[X&&[^Han]]" is written as
// "(?:(?!Han)[X])" (the v flag's [X--\p{Script=Han}] means the same).
const NOHAN = (cls) => "(?:(?!\\p{Script=Han})[" + cls + "])";
const UP = "\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}", LO = "\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}";
const KIMI_JS =
  "\\p{Script=Han}+" +
  "|[^\\r\\n\\p{L}\\p{N}]?" + NOHAN(UP) + "*" + NOHAN(LO) + "+" + CONTR +
  "|[^\\r\\n\\p{L}\\p{N}]?" + NOHAN(UP) + "+" + NOHAN(LO) + "*" + CONTR +
  "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function o200kRanks() {
  // both packages carry the same table; prefer js-tiktoken's
  try { return require("js-tiktoken/ranks/o200k_base"); } catch (e) {}
  return require("tiktoken/encoders/o200k_base.json");
}

function cmdExport(dir) {
  const r = o200kRanks();
  const out = [];
  let next = 0;
  for (const line of r.bpe_ranks.split("\n")) {
    if (!line) continue;
    const [, off, ...toks] = line.split(" ");
    if (+off !== next) throw new Error(`rank gap at ${off}`);
    for (const t of toks) out.push(`${t} ${next++}`);
  }
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(dir + "/tiktoken.model", out.join("\n") + "\n");
}

function makeEncoder(impl, pat) {
  const r = o200kRanks();
  if (impl === "wasm") {
    const { Tiktoken } = require("tiktoken/lite");
    const t = new Tiktoken(r.bpe_ranks, {}, pat === "kimi" ? KIMI_RUST : r.pat_str);
    return (s) => t.encode_ordinary(s);
  }
  const { Tiktoken } = require("js-tiktoken/lite");
  const t = new Tiktoken(pat === "kimi" ? { ...r, pat_str: KIMI_JS } : r);
  return (s) => t.encode(s, [], []);
}

// The release's Kimi wrapper (Python): 400,000-char chunks, then no more than 25,000
// consecutive chars of one str.isspace() class per piece; each piece encoded alone.
const PY_SPACE = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;
function kimiPieces(text) {
  const cps = Array.from(text), out = [];
  for (let c = 0; c < cps.length; c += 400000) {
    const s = cps.slice(c, c + 400000);
    let len = 0, isSp = s.length ? PY_SPACE.test(s[0]) : false, start = 0;
    for (let i = 0; i < s.length; i++) {
      const now = PY_SPACE.test(s[i]);
      if (isSp !== now) { len = 1; isSp = now; }
      else if (++len > 25000) { out.push(s.slice(start, i).join("")); start = i; len = 1; }
    }
    out.push(s.slice(start).join(""));
  }
  return out;
}

function cmdEncode(impl, pat, file) {
  const enc = makeEncoder(impl, pat);
  const text = fs.readFileSync(file, "utf8");
  let ids = [];
  if (pat === "kimi") for (const p of kimiPieces(text)) for (const id of enc(p)) ids.push(id);
  else ids = enc(text);
  process.stdout.write(Array.from(ids).join(" ") + "\n");
}

function cmdBench(impl, pat, file) {
  const enc0 = makeEncoder(impl, pat);
  const enc = pat === "kimi" ? (s) => { for (const p of kimiPieces(s)) enc0(p); } : enc0;
  const text = fs.readFileSync(file, "utf8");
  const mb = Buffer.byteLength(text) / 1e6;
  enc(text.slice(0, 100000)); // warm up
  let best = Infinity;
  for (let k = 0; k < 5; k++) {
    const t0 = process.hrtime.bigint();
    enc(text);
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    if (dt < best) best = dt;
  }
  process.stdout.write((mb / best).toFixed(2) + "\n");
}

const [cmd, ...a] = process.argv.slice(2);
if (cmd === "export") cmdExport(a[0]);
else if (cmd === "encode") cmdEncode(a[0], a[1], a[2]);
else if (cmd === "bench") cmdBench(a[0], a[1], a[2]);
else { process.stderr.write("usage: tiktoken-ref.cjs export|encode|bench ...\n"); process.exit(2); }
