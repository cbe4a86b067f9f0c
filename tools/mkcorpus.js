#!/usr/bin/env node
// mkcorpus.js: the tokenizer cross-check and benchmark corpus, generated, never downloaded.
//
//   node tools/mkcorpus.js OUT [MB] [nolong]   (default 1.2 MB; same bytes every run)
//
// nolong leaves out the 25,000+ char runs (tiktoken's BPE is quadratic on such a
// piece, which takes js-tiktoken minutes; the WASM build and k3chat take seconds).
//
// A seeded PRNG (mulberry32) mixes sections: English prose and code, Chinese, Japanese
// kanji and kana, Korean, Arabic, Hindi, emoji with ZWJ sequences and skin tones,
// combining marks, CRLF and mixed whitespace, long digit runs, contractions in every
// letter case, runs longer than the Kimi wrapper's 25,000-char cut, and random
// assigned code points. Random code points skip what the engines cannot agree on:
// unassigned (for node's ICU), surrogates, private use, and the few characters whose
// properties differ between the Unicode versions involved (U+0085 and U+FEFF, which
// js-tiktoken's \s treats differently from Rust's, and the Unicode 15.1 additions).
"use strict";
const fs = require("fs");

let seed = 0x6b33; // "k3"
function rnd() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const ri = (n) => Math.floor(rnd() * n);
const pick = (a) => a[ri(a.length)];
const range = (lo, hi) => String.fromCodePoint(lo + ri(hi - lo + 1));

const WORDS = ("the of and to in is was for on that with as by at from his her it an be this are " +
  "which or have had not but were they one all their there been has when who will more no if out " +
  "so said what up its about into than them can only other new some could time these two may then " +
  "do first any my now such like our over man me even most made after also did many before must " +
  "through back years where much your way well down should because each just those people how too " +
  "little state good very make world still own see men work long get here between both life being " +
  "under never day same another know while last might us great old year off come since against go " +
  "tokenizer kernel latency throughput gradient Mixture-of-Experts attention quantization").split(" ");
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"];

function caseVariant(s) {
  return [...s].map((c) => (rnd() < 0.5 ? c.toUpperCase() : c.toLowerCase())).join("");
}

function prose() {
  let out = "";
  const n = 5 + ri(15);
  for (let i = 0; i < n; i++) {
    let w = pick(WORDS);
    if (i === 0) w = w[0].toUpperCase() + w.slice(1);
    if (rnd() < 0.08) w = w.toUpperCase();
    if (rnd() < 0.1) w += caseVariant(pick(CONTRACTIONS));
    out += (i ? " " : "") + w;
    if (rnd() < 0.07) out += pick([",", ";", " -", ":", " (" + pick(WORDS) + ")"]);
  }
  return out + pick([". ", ".\n", "? ", "! ", "...\n\n", ".\r\n"]);
}

function code() {
  const id = () => pick(WORDS).replace(/[^a-zA-Z]/g, "") + (rnd() < 0.3 ? "_" + ri(100) : "");
  const snippets = [
    () => `static int ${id()}(const char *${id()}, size_t n) {\n    for (size_t i = 0; i < n; i++)\n        if (${id()}[i] == '\\n') return (int)i;\n    return -1;\n}\n`,
    () => `def ${id()}(${id()}, ${id()}=None):\n    """${prose().trim()}"""\n    return [x ** 2 for x in range(${ri(1000)}) if x % ${1 + ri(9)} == 0]\n\n`,
    () => `const ${id()} = async (${id()}) => {\n\tconst r = await fetch(\`/api/v1/${id()}?q=\${encodeURIComponent(${id()})}\`);\n\treturn r.json(); // ${prose().trim()}\n};\n`,
    () => `<div class="${id()}" data-id="${ri(99999)}">&amp; ${prose().trim()}</div>\r\n`,
    () => `SELECT ${id()}, COUNT(*) FROM ${id()} WHERE ${id()} >= ${ri(1e6)} GROUP BY 1;\n`,
    () => `    // TODO(${id()}): ${"=".repeat(ri(40))}>>> ${ri(1e9)} 0x${ri(1e9).toString(16)}\n`,
  ];
  return pick(snippets)();
}

const HAN = () => range(0x4e00, 0x9fa5);
const KANA = () => (rnd() < 0.5 ? range(0x3041, 0x3093) : range(0x30a1, 0x30f6));
const HANGUL = () => range(0xac00, 0xd7a3);
const ARABIC = () => range(0x0621, 0x064a);
const DEVA = () => (rnd() < 0.7 ? range(0x0915, 0x0939) : String.fromCodePoint(pick([0x093e, 0x093f, 0x0940, 0x0941, 0x0947, 0x094b, 0x094d, 0x0902])));

function script(gen, punct, space) {
  let s = "";
  const n = 10 + ri(60);
  for (let i = 0; i < n; i++) {
    s += gen();
    if (rnd() < 0.1) s += pick(punct);
    if (space && rnd() < 0.15) s += " ";
  }
  return s + pick(punct) + (rnd() < 0.5 ? "\n" : "");
}

function japanese() {
  let s = "";
  for (let i = 0; i < 10 + ri(50); i++) s += rnd() < 0.4 ? HAN() : KANA();
  return s + pick(["。", "、", "！", "？"]) + (rnd() < 0.3 ? "\n" : "");
}

const SKIN = [0x1f3fb, 0x1f3fc, 0x1f3fd, 0x1f3fe, 0x1f3ff];
function emoji() {
  const forms = [
    () => String.fromCodePoint(0x1f600 + ri(0x4f)),
    () => String.fromCodePoint(0x1f44d, pick(SKIN)),
    () => String.fromCodePoint(0x1f468, 0x200d, 0x1f469, 0x200d, 0x1f467, 0x200d, 0x1f466),
    () => String.fromCodePoint(0x1f469, pick(SKIN), 0x200d, 0x1f4bb),
    () => String.fromCodePoint(0x1f3f3, 0xfe0f, 0x200d, 0x1f308),
    () => String.fromCodePoint(0x1f1ef, 0x1f1f5),
    () => String.fromCodePoint(0x2764, 0xfe0f),
  ];
  let s = "";
  for (let i = 0; i < 1 + ri(8); i++) s += pick(forms)() + (rnd() < 0.3 ? " " : "");
  return s;
}

function combining() {
  let s = "";
  for (let i = 0; i < 5 + ri(20); i++) {
    s += pick(["a", "e", "o", "Z", "n", " ", "'", "1"]);
    for (let k = ri(4); k > 0; k--) s += String.fromCodePoint(0x0300 + ri(0x70));
  }
  return s + " ";
}

function whitespace() {
  const ws = [" ", "  ", "\t", "\r\n", "\n", "\n\n", "\r", "\u00a0", "\u3000", "\u2003", "\u200b", "\f", "\v", "\u2028", "\u001c", " \n \n"];
  let s = "";
  for (let i = 0; i < 3 + ri(10); i++) s += pick(ws) + (rnd() < 0.5 ? pick(WORDS) : "");
  return s;
}

function digits() {
  let s = "";
  for (let i = 0, n = 1 + ri(40); i < n; i++) s += ri(10);
  return s + pick([" ", ".", ",", "\n", "-", "/"]) + (rnd() < 0.3 ? "" + ri(10) + "\u0660\u0661\u0967\uff11" : "");
}

const SKIP = [[0x0085, 0x0085], [0xfeff, 0xfeff], [0x2ebf0, 0x2ee5d], [0x2ffc, 0x2fff], [0x31ef, 0x31ef]];
function randomUnicode() {
  let s = "";
  while (s.length < 40) {
    const plane = rnd();
    const cp = plane < 0.75 ? ri(0x10000) : plane < 0.95 ? 0x10000 + ri(0x10000) : 0x20000 + ri(0x20000);
    if (SKIP.some(([lo, hi]) => cp >= lo && cp <= hi)) continue;
    const ch = String.fromCodePoint(cp);
    if (/[\p{Cn}\p{Cs}\p{Co}]/u.test(ch)) continue;
    s += ch;
  }
  return s;
}

const SECTIONS = [
  [30, prose], [14, code],
  [6, () => script(HAN, ["，", "。", "、", "：", "“", "”"], false)],
  [5, japanese],
  [5, () => script(HANGUL, [".", ",", "?"], true)],
  [4, () => script(ARABIC, ["،", ".", "؟"], true)],
  [4, () => script(DEVA, ["।", ","], true)],
  [4, emoji], [4, combining], [6, whitespace], [5, digits], [6, randomUnicode],
];
const TOTAL_W = SECTIONS.reduce((a, [w]) => a + w, 0);

function main() {
  const out = process.argv[2];
  const mb = +(process.argv[3] || 1.2);
  const long = process.argv[4] !== "nolong";
  if (!out) {
    process.stderr.write("usage: mkcorpus.js OUT [MB]\n");
    process.exit(2);
  }
  const parts = [];
  let bytes = 0, nextLong = 200000;
  while (bytes < mb * 1e6) {
    let r = rnd() * TOTAL_W, gen = SECTIONS[0][1];
    for (const [w, g] of SECTIONS) if ((r -= w) < 0) { gen = g; break; }
    let s = gen();
    if (long && bytes > nextLong) { // longer than the Kimi wrapper's 25,000-char runs
      s = pick(["a", " ", "\u4e00", "-", "7"]).repeat(25000 + ri(2000)) + " x\n";
      nextLong += 400000;
    }
    parts.push(s);
    bytes += Buffer.byteLength(s);
  }
  fs.writeFileSync(out, parts.join(""));
}
main();
