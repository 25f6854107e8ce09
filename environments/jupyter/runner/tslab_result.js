// Loaded by Node (`--require`, see executor/languages.py) before tslab in the JavaScript and
// TypeScript kernels. tslab prints a cell's last value with console.log, where Python's kernel
// returns it as the cell's result; the image's tslab calls the function set here instead
// (the build patches that one line, TSLAB_PATCH), which publishes the value as a display
// marked "cellmate/result". The runner's client turns the marked display into the
// execute_result Python's kernel would send (runner/client.py). Without this file tslab
// prints the value as it always did.
"use strict";

const path = require("path");
const util = require("util");

const MARK = "cellmate/result";
// Deno's kernel convention for a value that shows itself: a method that returns a MIME bundle.
const DISPLAY = Symbol.for("Jupyter.display");

function bundle(value) {
  // What console.log would have printed: a string as it is, anything else inspected.
  const data = { "text/plain": util.format(value) };
  try {
    const own = typeof value[DISPLAY] === "function" ? value[DISPLAY]() : null;
    if (own !== null && typeof own === "object") {
      for (const [mime, content] of Object.entries(own)) {
        if (typeof content === "string" || (mime.endsWith("json") && content !== undefined)) {
          data[mime] = content;
        }
      }
    }
  } catch (e) {
    // A value whose own display fails still has its text.
  }
  return data;
}

function show(value) {
  // tslab sets the current request's publisher before it runs a cell. Node's main script
  // (argv[1]) is tslab's bin/tslab, so this is the very module tslab loaded, wherever it is
  // installed (require.main is not set yet when this file loads).
  const jupyter = require(path.resolve(process.argv[1], "..", "..", "dist", "jupyter.js"));
  const publish = jupyter.lastWriteDisplayData;
  if (typeof publish !== "function") {
    console.log(value);
    return;
  }
  publish({ data: bundle(value), metadata: { [MARK]: true }, transient: {} }, false);
}

Object.defineProperty(globalThis, Symbol.for("cellmate.result"), { value: show });
