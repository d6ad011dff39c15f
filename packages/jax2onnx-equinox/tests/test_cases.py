def test_case(jax2onnx_case, check_case):
    check_case(jax2onnx_case)
