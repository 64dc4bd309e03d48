"""jax_argreduce in a few lines: a greedy pick, sampling (with filters), and a sharded vocabulary.

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

# Filters as serving engines pass them, per sequence: the 50 most likely tokens, then their
# smallest prefix holding 90% of the mass (min_p works alike). Every sample is among the 50.
top_k = jnp.array([1, 5, 50, 50, 50, 50, 50, 50])
filtered = jax.jit(lambda k, l: jax_argreduce.categorical(
    k, l, temperature=0.8, top_k=top_k, top_p=0.9))(keys, logits)
top50 = np.argsort(-np.asarray(logits, np.float32), axis=-1, kind="stable")[:, :50]
assert all(int(s) in top50[r, :int(top_k[r])] for r, s in enumerate(np.asarray(filtered)))
print("filtered", filtered, "(top_k 1/5/50, top_p 0.9)")

# The vocabulary split over 4 devices: each reduces its shard to (value, global index) pairs,
# exchanged once; the logits are never gathered. Same tokens, same samples as unsharded.
mesh = jax.make_mesh((4,), ("vocab",), devices=jax.devices("cpu")[:4])
split = jax.device_put(logits, jax.NamedSharding(mesh, jax.P(None, "vocab")))
split_greedy = jax.jit(lambda l: jax_argreduce.argmax(l, axis=-1))(split)
split_sampled = sample(keys, split, 0)
assert (np.asarray(split_greedy) == np.asarray(greedy)).all()
assert (np.asarray(split_sampled) == np.asarray(sampled)).all()
print("sharded ", split_greedy, split_sampled, "(vocab split over", mesh.devices.size, "devices)")
