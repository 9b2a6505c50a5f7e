// Tokenize files with the grammar of this folder the way VS Code does (vscode-textmate on
// the Oniguruma regex engine), and print the tokens as JSON:
//   {"FILE": [[line, startColumn, endColumn, "scope scope ..."], ...], ...}
// Lines and columns are 1-based, columns count code points, end exclusive.
// Usage: node tokenize.js FILE...
"use strict";
const fs = require("fs");
const path = require("path");
const oniguruma = require("vscode-oniguruma");
const textmate = require("vscode-textmate");

const GRAMMAR = path.join(__dirname, "syntaxes", "rules.tmLanguage.json");

async function tokenize(files) {
  const wasm = fs.readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm"));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new textmate.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
      createOnigString: (text) => new oniguruma.OnigString(text),
    }),
    loadGrammar: async (scope) => scope === "source.rules"
      ? textmate.parseRawGrammar(fs.readFileSync(GRAMMAR, "utf8"), GRAMMAR)
      : null,
  });
  const grammar = await registry.loadGrammar("source.rules");
  const out = {};
  for (const file of files) {
    const tokens = [];
    let stack = textmate.INITIAL;
    fs.readFileSync(file, "utf8").split(/\r?\n/).forEach((line, index) => {
      const result = grammar.tokenizeLine(line, stack);
      const column = (unit) => Array.from(line.slice(0, unit)).length + 1;  // UTF-16 -> code points
      for (const t of result.tokens) {
        tokens.push([index + 1, column(t.startIndex), column(t.endIndex), t.scopes.join(" ")]);
      }
      stack = result.ruleStack;
    });
    out[file] = tokens;
  }
  return out;
}

tokenize(process.argv.slice(2)).then(
  (out) => process.stdout.write(JSON.stringify(out)),
  (err) => { process.stderr.write(`tokenize: ${err.stack || err}\n`); process.exit(1); });
