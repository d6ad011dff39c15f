// Run the served model in onnxruntime-web (WebAssembly) and post the outputs back.
// The Python side serves /ort/ (the package's dist folder), /model.onnx,
// /request.json, and receives POST /result.
import * as ort from "/ort/ort.wasm.min.mjs";
import { bytesOf, toTensor } from "/tensors.mjs";

function fromBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function toBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

async function post(body) {
  await fetch("/result", { method: "POST", body: JSON.stringify(body) });
}

try {
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.wasmPaths = "/ort/";
  const request = await (await fetch("/request.json")).json();
  const model = new Uint8Array(await (await fetch("/model.onnx")).arrayBuffer());
  const session = await ort.InferenceSession.create(model, { executionProviders: ["wasm"] });
  const feeds = {};
  for (const entry of request.inputs) {
    feeds[entry.name] = toTensor(ort, entry, fromBase64(entry.data));
  }
  const results = await session.run(feeds);
  const outputs = session.outputNames.map((name) => ({
    name,
    type: results[name].type,
    dims: Array.from(results[name].dims),
    data: toBase64(bytesOf(results[name])),
  }));
  await post({ outputs });
} catch (err) {
  await post({ error: String(err && err.stack ? err.stack : err) });
}
