"""An MJX cart-pole step (MuJoCo's JAX physics) as ONNX: nodes, conversion time, numbers.

    pip install ".[bench]"          # mujoco-mjx: a benchmark's dependency, not the suite's
    python benchmarks/mjx_cartpole.py

One ``mjx.step`` of a cart on a slider with a hinged pole (Euler integrator,
one motor), converted with its model's arrays as constants; the nodes are
counted in every graph, and ONNX Runtime's result is compared with
``jax.jit``'s on the same state.
"""

from __future__ import annotations

import time

import jax
import numpy as np
import onnxruntime as ort

import jax2onnx
from jax2onnx_testkit import op_counts

CARTPOLE = """
<mujoco model="cartpole">
  <option timestep="0.01" integrator="Euler"/>
  <worldbody>
    <body name="cart" pos="0 0 1">
      <joint name="slider" type="slide" axis="1 0 0" limited="true" range="-2 2" damping="0.1"/>
      <geom type="box" size="0.2 0.1 0.05" mass="1"/>
      <body name="pole" pos="0 0 0">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.6" size="0.04" mass="0.1"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" gear="10" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def main() -> None:
    import mujoco
    from mujoco import mjx

    model = mjx.put_model(mujoco.MjModel.from_xml_string(CARTPOLE))

    def step(qpos, qvel, ctrl):
        data = mjx.make_data(model).replace(qpos=qpos, qvel=qvel, ctrl=ctrl)
        data = mjx.step(model, data)
        return data.qpos, data.qvel

    state = [
        np.array([0.1, 0.2], np.float32),
        np.array([0.0, 0.1], np.float32),
        np.array([0.5], np.float32),
    ]
    start = time.perf_counter()
    proto = jax2onnx.to_onnx(step, state)
    seconds = time.perf_counter() - start
    counts = op_counts(proto)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), state)})
    want = jax.jit(step)(*state)
    diff = max(float(np.max(np.abs(g - np.asarray(w)))) for g, w in zip(got, want))
    top = sorted(counts.items(), key=lambda item: -item[1])[:8]
    listed = ", ".join(f"{op} {n}" for op, n in top)
    print(f"nodes {sum(counts.values())} ({listed}); conversion {seconds:.2f} s")
    print(f"max abs diff from jax.jit {diff:.1e}")


if __name__ == "__main__":
    main()
