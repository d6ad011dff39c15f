// Tensors between jax2onnx and onnxruntime-web: shared by run_node.mjs and page.mjs.
// Values travel as base64 of their little-endian bytes; float16 as its uint16 bits.
export const ARRAYS = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array,
  int8: Int8Array, int16: Int16Array, int32: Int32Array, int64: BigInt64Array,
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array,
  bool: Uint8Array,
};

// An ort.Tensor from a request entry whose bytes are already decoded.
export function toTensor(ort, entry, bytes) {
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return new ort.Tensor(entry.type, new ARRAYS[entry.type](copy.buffer), entry.dims);
}

// The raw bytes of an output tensor's data.
export function bytesOf(tensor) {
  const data = tensor.data;
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}
