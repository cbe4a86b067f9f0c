// grammar-keep.cjs CASES OUT [LABEL]: ajv's verdict on each enum value of test-grammar --keep.
// CASES: lines "SCHEMA<TAB>VALUE" (# comments and empty lines skipped); OUT: lines "LINE<TAB>KEPT"
// (KEPT 1 when k3chat's grammar of SCHEMA with "enum": [VALUE] takes VALUE). Every value is kept
// exactly when ajv (draft 2020-12) with ajv-formats (full mode) validates it against SCHEMA.
// Prints PASS:/FAIL: lines (tests/run.sh protocol); exit status 0 either way.
"use strict";
const fs = require("fs");
const Ajv2020 = require("ajv/dist/2020");
const addFormats = require("ajv-formats");
const [casesFile, outFile, label] = process.argv.slice(2);
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
const cases = fs.readFileSync(casesFile, "utf8").split("\n");
const got = new Map();
for (const l of fs.readFileSync(outFile, "utf8").split("\n").filter((l) => l.length)) {
  const [line, kept] = l.split("\t");
  got.set(Number(line), kept === "1");
}
let n = 0, agree = 0, valid = 0;
const bad = [];
cases.forEach((c, i) => {
  if (!c.length || c[0] === "#") return;
  const tab = c.indexOf("\t");
  const want = ajv.validate(JSON.parse(c.slice(0, tab)), JSON.parse(c.slice(tab + 1)));
  n++;
  valid += want;
  if (got.get(i + 1) === want) agree++;
  else bad.push(`line ${i + 1}: ${c}: ajv ${want ? "valid" : "invalid"}, grammar ${got.has(i + 1) ? (got.get(i + 1) ? "kept it" : "left it out") : "no verdict"}`);
});
const tag = label || "cases";
console.log(`${n > 0 && agree === n ? "PASS" : "FAIL"}: ${tag}: ${agree} of ${n} values kept exactly when ajv ${require("ajv/package.json").version} + ajv-formats validates them (${valid} valid)`);
for (const b of bad.slice(0, 8)) console.log("# " + b);
