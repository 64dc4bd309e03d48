"""jax_argreduce in a few lines: a greedy pick, sampling, and a sharded vocabulary.

    python examples/quickstart.py

Runs in a few seconds on a CPU; on a GPU the same calls run the CUDA kernels (the sharded
part uses 4 virtual CPU devices either way). Each result is checked against numpy or against
the unsharded call, so a wrong answer stops the script.
"""

import jax
import jax.numpy as jnp
import numpy as np

import jax_argreduce

# Four virtual CPU devices for the sharded call: set before the first computation starts JAX's
# backends.
jax.config.update("jax_num_cpu_devices", 4)

batch, vocab = 8, 32000
# (Drawn in float32 and scaled like logits: bfloat16 normals would saturate into ties at the top.)
logits = (3 * jax.random.normal(jax.random.key(0), (batch, vocab))).astype(jnp.bfloat16)

# Greedy: numpy's exact argmax (ties to the lowest index, NaN wins), as int32 like jnp.argmax.
greedy = jax.jit(lambda l: jax_argreduce.argmax(l, axis=-1))(logits)
assert (np.asarray(greedy) == np.argmax(np.asarray(logits), axis=-1)).all()
print("greedy  ", greedy)

# Sampling from softmax(logits / T): one key per sequence (a row's sample then does not depend
# on the batch it sits in) and one temperature per sequence; T = 0 is exactly the argmax.
keys = jax.random.split(jax.random.key(1), batch)
temperature = jnp.array([0.0, 0.5, 0.7, 0.7, 1.0, 1.0, 1.2, 1.5])


@jax.jit
def sample(keys, logits, step):
  # Fresh noise every decode step: fold the step into each sequence's key.
  step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)
  return jax_argreduce.categorical(step_keys, logits, temperature=temperature)


sampled = sample(keys, logits, 0)
assert sampled[0] == greedy[0]
print("sampled ", sampled, "(step 0);", sample(keys, logits, 1), "(step 1)")

# The vocabulary split over 4 devices: each reduces its shard to (value, global index) pairs,
# exchanged once; the logits are never gathered. Same tokens, same samples as unsharded.
mesh = jax.make_mesh((4,), ("vocab",), devices=jax.devices("cpu")[:4])
split = jax.device_put(logits, jax.NamedSharding(mesh, jax.P(None, "vocab")))
split_greedy = jax.jit(lambda l: jax_argreduce.argmax(l, axis=-1))(split)
split_sampled = sample(keys, split, 0)
assert (np.asarray(split_greedy) == np.asarray(greedy)).all()
assert (np.asarray(split_sampled) == np.asarray(sampled)).all()
print("sharded ", split_greedy, split_sampled, "(vocab split over", mesh.devices.size, "devices)")
