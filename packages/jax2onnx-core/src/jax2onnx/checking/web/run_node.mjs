// Run an ONNX model in onnxruntime-web (WebAssembly) under Node.js.
// Usage: node run_node.mjs <onnxruntime-web package dir> <request.json>
// The request holds the model path and the inputs (base64 little-endian bytes);
// the outputs are printed to stdout as JSON in the same form.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

import { bytesOf, toTensor } from "./tensors.mjs";

const [packageDir, requestPath] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(packageDir), "package.json"));
const ort = require(path.resolve(packageDir));
const request = JSON.parse(readFileSync(requestPath, "utf8"));

function decode(entry) {
  return toTensor(ort, entry, Buffer.from(entry.data, "base64"));
}

function encode(name, tensor) {
  const data = Buffer.from(bytesOf(tensor)).toString("base64");
  return { name, type: tensor.type, dims: Array.from(tensor.dims), data };
}

ort.env.wasm.numThreads = 1;
try {
  const session = await ort.InferenceSession.create(request.model, { executionProviders: ["wasm"] });
  const feeds = {};
  for (const entry of request.inputs) feeds[entry.name] = decode(entry);
  const results = await session.run(feeds);
  const outputs = session.outputNames.map((name) => encode(name, results[name]));
  process.stdout.write(JSON.stringify({ outputs }));
} catch (err) {
  process.stderr.write(String(err && err.stack ? err.stack : err));
  process.exit(1);
}
