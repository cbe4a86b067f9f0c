// grammar-validate.cjs CORPUS OUTPUTS [LABEL [MIN]]: validates constrained outputs with ajv (draft 2020-12)
// and ajv-formats, an implementation independent of k3chat's grammar engine.
// CORPUS: one JSON Schema a line. OUTPUTS: lines "LINE<TAB>SEED<TAB>STATUS<TAB>TEXT" (LINE is
// 1-based in CORPUS; STATUS "end" when the output ended with <|end_of_msg|>). MIN: the schemas the
// outputs must cover (default 40).
// Prints PASS:/FAIL: lines (tests/run.sh protocol); exit status 0 either way.
"use strict";
const fs = require("fs");
const Ajv2020 = require("ajv/dist/2020");
const addFormats = require("ajv-formats");
const [corpusFile, outFile, label, minArg] = process.argv.slice(2);
const least = minArg ? Number(minArg) : 40;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const schemas = fs.readFileSync(corpusFile, "utf8").split("\n").filter((l) => l.length);
const validators = schemas.map((s) => ajv.compile(JSON.parse(s)));
const lines = fs.readFileSync(outFile, "utf8").split("\n").filter((l) => l.length);
let ok = 0, ended = 0, parsed = 0;
const bad = [];
const seen = new Set();
for (const l of lines) {
  const [line, seed, status, ...rest] = l.split("\t");
  const text = rest.join("\t");
  seen.add(line);
  if (status === "end") ended++;
  let doc;
  try { doc = JSON.parse(text); parsed++; } catch (e) { bad.push(`line ${line} seed ${seed}: not JSON: ${text.slice(0, 120)}`); continue; }
  const v = validators[Number(line) - 1];
  if (v(doc)) ok++;
  else bad.push(`line ${line} seed ${seed}: ${ajv.errorsText(v.errors)}: ${text.slice(0, 120)}`);
}
const n = lines.length;
const tag = label || "outputs";
console.log(`${seen.size >= least && n > 0 ? "PASS" : "FAIL"}: ${tag}: ${n} outputs over ${seen.size} schemas (at least ${least} schemas asked)`);
console.log(`${ended === n ? "PASS" : "FAIL"}: ${tag}: ${ended} of ${n} end with <|end_of_msg|> (none stopped by max tokens)`);
console.log(`${parsed === n ? "PASS" : "FAIL"}: ${tag}: ${parsed} of ${n} parse with JSON.parse`);
console.log(`${ok === n ? "PASS" : "FAIL"}: ${tag}: ${ok} of ${n} validate with ajv ${require("ajv/package.json").version} + ajv-formats`);
for (const b of bad.slice(0, 5)) console.log("# " + b);
