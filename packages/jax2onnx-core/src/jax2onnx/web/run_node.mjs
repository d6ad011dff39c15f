// Run an ONNX model in onnxruntime-web (WebAssembly) under Node.js.
// Usage: node run_node.mjs <onnxruntime-web package dir> <request.json>
// The request holds the model path and the inputs (base64 little-endian bytes);
// the outputs are printed to stdout as JSON in the same form.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [packageDir, requestPath] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(packageDir), "package.json"));
const ort = require(path.resolve(packageDir));
const request = JSON.parse(readFileSync(requestPath, "utf8"));

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array,
  int8: Int8Array, int16: Int16Array, int32: Int32Array, int64: BigInt64Array,
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array,
  bool: Uint8Array,
};

function decode(entry) {
  const bytes = Buffer.from(entry.data, "base64");
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  const Kind = ARRAYS[entry.type];
  return new ort.Tensor(entry.type, new Kind(copy.buffer), entry.dims);
}

function encode(name, tensor) {
  const data = tensor.data;
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return { name, type: tensor.type, dims: Array.from(tensor.dims), data: bytes.toString("base64") };
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
