"""Generate ``docs/FEATURES.md``: what each namespace provides and what is still missing.

``python -m ember._src.features > docs/FEATURES.md``. The "missing" columns compare each namespace
with the reference API it mirrors (NumPy's functions for ``ember.numpy``; JAX's names for the
transformations, ``lax``, ``nn``, ``random``, ``linalg``, ``fft`` and ``scipy.special``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import numpy as np

TRANSFORMS = """jit grad value_and_grad jvp vjp linearize vmap jacfwd jacrev hessian linear_transpose
custom_jvp custom_vjp checkpoint remat eval_shape make_program stop_gradient ShapeDtypeStruct
block_until_ready device_put set_debug check_leaks memory_stats""".split()
TRANSFORMS += """make_jaxpr jacobian devices local_devices device_count local_device_count process_index
process_count named_call ensure_compile_time_eval pure_callback""".split()
TRANSFORMS += "make_mesh set_mesh shard_map NamedSharding P".split()

# JAX's library namespaces (docs/jax_compat.md): module -> (title, JAX's public names)
COMPAT = {
    "ember.tree_util": ("Pytrees, JAX's names", """tree_map tree_leaves tree_flatten tree_unflatten
        tree_structure tree_reduce tree_all tree_transpose register_pytree_node register_pytree_node_class
        register_pytree_with_keys register_pytree_with_keys_class register_dataclass register_static Partial
        tree_flatten_with_path tree_leaves_with_path tree_map_with_path keystr treedef_is_leaf
        treedef_children treedef_tuple all_leaves"""),
    "ember.flatten_util": ("Flattening", "ravel_pytree"),
    "ember.sharding": ("Sharding over MPI processes (docs/sharding.md)", """Mesh AbstractMesh NamedSharding
        PartitionSpec SingleDeviceSharding Sharding AxisType reshard get_abstract_mesh set_mesh use_mesh"""),
    "ember.nn.initializers": ("Initializers", """zeros ones constant uniform normal truncated_normal
        variance_scaling glorot_uniform glorot_normal xavier_uniform xavier_normal he_uniform he_normal
        kaiming_uniform kaiming_normal lecun_uniform lecun_normal orthogonal delta_orthogonal"""),
    "ember.example_libraries.stax": ("JAX's example layers", """Dense Conv GeneralConv Relu Tanh Sigmoid
        Elu LeakyRelu Selu Gelu Softplus LogSoftmax Softmax Exp Flatten Identity FanOut FanInSum FanInConcat
        Dropout BatchNorm MaxPool AvgPool SumPool serial parallel elementwise shape_dependent ConvTranspose
        Conv1DTranspose GeneralConvTranspose"""),
    "ember.example_libraries.optimizers": ("JAX's example optimizers", """sgd momentum nesterov adagrad
        rmsprop rmsprop_momentum adam adamax sm3 optimizer constant exponential_decay inverse_time_decay
        polynomial_decay piecewise_constant make_schedule l2_norm clip_grads unpack_optimizer_state
        pack_optimizer_state"""),
    "ember.optim": ("optax-style optimizers", """GradientTransformation apply_updates chain sgd momentum
        nesterov adam adamw rmsprop adagrad lion clip_by_global_norm clip masked add_decayed_weights
        scale_by_adam scale_by_schedule constant_schedule linear_schedule cosine_decay_schedule
        warmup_cosine_decay_schedule exponential_decay join_schedules"""),
    "ember.ops": ("Segment reductions", "segment_sum segment_max segment_min segment_prod"),
    "ember.custom_batching": ("Custom batching", "custom_vmap"),
    "ember.scipy.optimize": ("Optimization", "minimize"),
    "ember.scipy.signal": ("Signal processing", "convolve correlate fftconvolve convolve2d stft istft"),
    "ember.scipy.integrate": ("Integration", "trapezoid"),
    "ember.scipy.ndimage": ("Image interpolation", "map_coordinates"),
    "ember.image": ("Image resizing", "resize scale_and_translate"),
    "ember.experimental.ode": ("ODE solver", "odeint"),
    "ember.debug": ("Debug printing and host callbacks for their effect", "print callback"),
}

# jax.scipy.stats: distribution -> the methods JAX has for it
STATS = {"norm": "logpdf pdf cdf logcdf sf logsf ppf isf", "multivariate_normal": "logpdf pdf",
         "t": "logpdf pdf", "gamma": "logpdf pdf cdf logcdf sf logsf",
         "beta": "logpdf pdf cdf logcdf sf logsf", "dirichlet": "logpdf pdf", "poisson": "logpmf pmf cdf",
         "bernoulli": "logpmf pmf cdf ppf", "binom": "logpmf pmf", "uniform": "logpdf pdf cdf ppf",
         "expon": "logpdf pdf cdf logcdf sf logsf ppf",
         "laplace": "logpdf pdf cdf", "logistic": "logpdf pdf cdf sf ppf isf",
         "cauchy": "logpdf pdf cdf logcdf sf logsf ppf isf", "chi2": "logpdf pdf cdf logcdf sf logsf",
         "geom": "logpmf pmf", "multinomial": "logpmf pmf"}

LAX = """abs acos acosh add argmax argmin asin asinh atan atan2 atanh bitcast_convert_type broadcast
broadcast_in_dim broadcasted_iota cbrt ceil clamp complex concatenate cond conj conv
conv_general_dilated conv_dimension_numbers conv_transpose conv_with_general_padding convert_element_type
cos cosh cummax cummin cumprod cumsum cumlogsumexp digamma div dot dot_general
dynamic_slice dynamic_update_slice dynamic_slice_in_dim dynamic_index_in_dim eq erf erf_inv erfc exp
exp2 expand_dims expm1 floor fori_loop full full_like gather ge gt imag integer_pow iota is_finite le
lgamma log log1p logistic lt map max min mul ne neg nextafter pad population_count pow real reduce
reduce_and reduce_max reduce_min reduce_or reduce_precision reduce_prod reduce_sum reduce_window rem
reshape rev round rsqrt scan scatter scatter_add scatter_mul scatter_min scatter_max select
select_n shift_left shift_right_arithmetic shift_right_logical sign sin sinh slice slice_in_dim sort
sort_key_val sqrt square squeeze
stop_gradient sub switch tan tanh top_k transpose while_loop associative_scan""".split()

NN = """relu relu6 leaky_relu elu selu celu gelu glu silu swish sigmoid log_sigmoid softplus soft_sign
hard_tanh hard_sigmoid hard_silu hard_swish softmax log_softmax logsumexp one_hot standardize
dot_product_attention mish squareplus sparse_plus normalize""".split()

RANDOM = """key PRNGKey split fold_in key_data bits uniform normal bernoulli randint categorical
permutation choice truncated_normal gumbel exponential gamma beta dirichlet poisson
multivariate_normal orthogonal laplace logistic""".split()

LINALG = """cholesky qr eigh eigvalsh svd svdvals solve inv det slogdet lstsq pinv matrix_rank
matrix_power norm vector_norm matrix_norm cross outer multi_dot eig eigvals tensorsolve
tensorinv""".split()

FFT = """fft ifft rfft irfft hfft ihfft fft2 ifft2 rfft2 irfft2 fftn ifftn rfftn irfftn fftfreq
rfftfreq fftshift ifftshift""".split()

SPECIAL = """erf erfc erfinv gammaln digamma logit expit xlogy xlog1py logsumexp softmax log_softmax
i0e i1e betaln gamma""".split()

# NumPy names that make no sense for ember (I/O, printing, legacy, Python-object machinery).
NUMPY_SKIP = set("""add_docstring add_newdoc add_newdoc_ufunc asmatrix bmat busday_count busday_offset
is_busday datetime_as_string datetime_data fromfile fromregex fromstring frombuffer fromiter
genfromtxt load loadtxt save savetxt savez savez_compressed memmap get_printoptions set_printoptions
printoptions getbufsize setbufsize geterr seterr geterrcall seterrcall errstate array2string
array_repr array_str base_repr binary_repr format_float_positional format_float_scientific info
show_config show_runtime test typename mintypecode may_share_memory shares_memory
nested_iters get_include deprecate deprecate_with_doc disp lookfor safe_eval source who
from_dlpack frompyfunc vectorize piecewise apply_along_axis apply_over_axes asfortranarray
asarray_chkfinite ascontiguousarray require char rec emath ma matrix poly1d chararray recarray
broadcast busdaycalendar ndenumerate ndindex nditer flatiter dtype finfo iinfo format_parser
issubdtype isdtype isscalar iterable ndarray generic number object_ void str_ bytes_ record
memmap unravel_index ravel_multi_index copyto putmask place put fill_diagonal isfortran
require setxor1d""".split())


# Names of a mirrored API that do not apply to ember, with the reason: listed, never "missing".
NOT_APPLICABLE = {
    "ember.numpy": {"isnat": "ember has no datetime64/timedelta64 dtypes"},
}


def _public(mod: object) -> list[str]:
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    out = []
    for n in names:
        obj = getattr(mod, n, None)
        if callable(obj) and not inspect.ismodule(obj):
            out.append(n)
    return sorted(set(out))


def _numpy_reference() -> list[str]:
    out = []
    for n in dir(np):
        if n.startswith("_") or n in NUMPY_SKIP:
            continue
        obj = getattr(np, n)
        if isinstance(obj, np.ufunc) or inspect.isfunction(obj) or inspect.isbuiltin(obj) or \
                type(obj).__name__ in ("_ArrayFunctionDispatcher", "function"):
            out.append(n)
    return sorted(out)


def _try_import(name: str) -> object | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _section(title: str, module: str, reference: list[str] | None) -> list[str]:
    mod = _try_import(module)
    lines = [f"## `{module}`", ""]
    if mod is None:
        lines += [f"Not available yet (`import {module}` fails).", ""]
        if reference:
            lines += [f"Missing: {', '.join(f'`{n}`' for n in reference)}", ""]
        return lines
    have = _public(mod)
    lines += [f"{title}: {len(have)} public functions.", "", "| function | summary |", "|---|---|"]
    for n in have:
        obj = getattr(mod, n)
        doc = (f"NumPy's abstract scalar type ``numpy.{obj.__name__}`` (for ``issubdtype``)."
               if isinstance(obj, type) and obj.__module__ == "numpy" else inspect.getdoc(obj) or "")
        first = doc.strip().splitlines()[0] if doc.strip() else ""
        first = first.replace("|", "\\|")
        lines.append(f"| `{n}` | {first} |")
    lines.append("")
    if reference is not None:
        na = NOT_APPLICABLE.get(module, {})
        missing = [n for n in reference if n not in have and not hasattr(mod, n) and n not in na]
        if na:
            listed = "; ".join(f"`{n}` ({why})" for n, why in sorted(na.items()))
            lines += [f"**Not applicable**: {listed}", ""]
        if missing:
            lines += [f"**Missing** ({len(missing)}): " + ", ".join(f"`{n}`" for n in missing), ""]
        else:
            lines += ["**Missing**: nothing from the reference list.", ""]
    return lines


def _stats_section() -> list[str]:
    """``ember.scipy.stats``: each distribution's methods against the ones JAX has."""
    mod = _try_import("ember.scipy.stats")
    lines = ["## `ember.scipy.stats`", "", "| distribution | methods | missing (JAX has them) |",
             "|---|---|---|"]
    for name, methods in STATS.items():
        dist = getattr(mod, name, None) if mod is not None else None
        have = [m for m in methods.split() if dist is not None and hasattr(dist, m)]
        missing = [m for m in methods.split() if m not in have]
        lines.append(f"| `{name}` | {', '.join(have) or '-'} | {', '.join(missing) or '-'} |")
    return lines + [""]


def _jax_gaps_section() -> list[str]:
    """JAX's public names (recorded by ``python -m ember._src.compat.jax_names --update``) that
    ember's namespaces lack, checked against ember now."""
    from ember._src.compat import jax_names

    record = jax_names.load_record()
    gaps = jax_names.missing(record)
    total = sum(len(v) for v in gaps.values())
    lines = ["## JAX public names ember lacks", "",
             f"Every public name of JAX {record['jax_version']}'s namespaces (recorded in "
             "`src/ember/_src/compat/jax_public_names.json` by `python -m ember._src.compat.jax_names "
             f"--update`) that ember's counterpart does not have: {total} names. Sharding, "
             "devices and XLA-specific names are among them; see [jax_compat.md](jax_compat.md) for "
             "what ember provides and [jax_differences.md](jax_differences.md) for deliberate "
             "differences.", "", "| JAX namespace | missing | names |", "|---|---|---|"]
    for ns, names in gaps.items():
        lines.append(f"| `{ns}` | {len(names)} | {', '.join(f'`{n}`' for n in names)} |")
    return lines + [""]


def render() -> str:
    import ember  # noqa: F401  (declares primitives)
    from ember._src.core import PRIMITIVES

    lines = ["# ember features", "",
             "Generated by `python -m ember._src.features > docs/FEATURES.md`; a test checks it is "
             "current. \"Missing\" compares with the API each namespace mirrors (NumPy for "
             "`ember.numpy`, JAX for the others).", ""]
    lines += _section("Transformations and top-level API", "ember", TRANSFORMS)
    lines += _section("NumPy API", "ember.numpy", _numpy_reference())
    lines += _section("Primitive-level operations", "ember.lax", LAX)
    lines += _section("Neural-network functions", "ember.nn", NN)
    lines += _section("Random numbers (threefry2x32)", "ember.random", RANDOM)
    lines += _section("Linear algebra", "ember.numpy.linalg", LINALG)
    lines += _section("FFT", "ember.fft", FFT)
    lines += _section("Special functions", "ember.scipy.special", SPECIAL)
    lines += _section("Pytrees", "ember.tree", ["map", "flatten", "unflatten", "leaves", "structure",
                                                "reduce", "register_pytree_node",
                                                "register_dataclass"])
    for module, (title, names) in COMPAT.items():
        lines += _section(title, module, names.split())
    lines += _stats_section()
    lines += _jax_gaps_section()
    lines += ["## Primitives and their rules", ""]
    try:
        from ember._src.registry_report import rule_table
        lines += [rule_table(), ""]
    except ImportError:
        lines += [f"{len(PRIMITIVES)} primitives: " + ", ".join(f"`{p}`" for p in sorted(PRIMITIVES)), ""]
    lines += _native_section()
    lines += _torch_section()
    return "\n".join(lines).rstrip() + "\n"


def _torch_section() -> list[str]:
    """The ATen ops ``ember.torch.import_module`` has a handler for (docs/torch.md)."""
    from ember._src.torch_import.ops import OPS
    aten = sorted(op for op in OPS if op.startswith("aten."))
    lines = ["## PyTorch import: supported ATen ops", "",
             f"`ember.torch.import_module` lowers {len(aten)} core ATen ops (see docs/torch.md).", "",
             "| ATen op | lowering |", "|---|---|"]
    lines += [f"| `{op}` | {OPS[op].doc} |" for op in aten]
    from ember._src.torch_import.unsupported import NOT_SUPPORTED
    lines += ["", "### ATen ops without a handler", "",
              "The ops of torch's core ATen opset (and a few others exports keep) that the importer "
              "refuses, with the reason (`UnsupportedOpError` quotes it):", "",
              "| ATen op | why not |", "|---|---|"]
    lines += [f"| `{op}` | {why} |" for op, why in sorted(NOT_SUPPORTED.items())]
    return lines + [""]


def _native_section() -> list[str]:
    """How the native backend runs each primitive (from its op-info registry and the reasons the
    other primitives declare with ``na("lowering", ...)``)."""
    try:
        from ember._src.native import opinfo
    except ImportError:
        return []
    from ember._src.core import PRIMITIVES
    opinfo.declare()
    groups: dict[str, list[str]] = {}
    for name, p in sorted(PRIMITIVES.items()):
        groups.setdefault(opinfo.native_kind(p), []).append(name)
    lines = ["## Native backend coverage", "",
             "How `jit`'s native backend runs each primitive (all inside the program's one native call). "
             "A *fallback step* calls the primitive's NumPy implementation back from the compiled program.",
             "", "| how | primitives |", "|---|---|"]
    for kind, names in sorted(groups.items()):
        lines.append(f"| {kind} | {', '.join(f'`{n}`' for n in names)} |")
    from ember._src.native.emit import c_ops
    missing = _complex_without_rendering(c_ops)
    lines += ["", "**Complex values** (complex64/complex128) fuse in kernels for: "
              + ", ".join(f"`{n}`" for n in sorted(c_ops.COMPLEX_OPS))
              + ", and `reduce_sum`; matrix products run on BLAS (`?gemm`/`?gemv`); `fft`, `eig` (LAPACK "
              "`zgeev` for complex matrices), `dynamic_slice` and `dynamic_update_slice` are native calls. "
              "**Missing** on complex values (fallback steps): " + ", ".join(f"`{n}`" for n in missing)
              + "; the other reductions, sorts, cumulative scans (`cumsum` ...) and scatters.", "",
              "**Threads**: the parallel loops of a program's own steps (row kernels, elementwise maps, "
              "per-head products of attention, the float32 GEMM kernel's column panels) run on ember's "
              "thread pool, whose caller takes over chunks a late thread has not started (docs/jit.md), "
              "attention's per-head groups included (one head per chunk, per-thread scratch); "
              "one-loop whole-array reductions run in fixed blocks combined in order (the same bits on "
              "any thread count); loops inside native `scan`/`while` bodies, multi-loop whole-array "
              "reductions and split (concatenate) kernels still run in OpenMP regions.", ""]
    return lines


def _complex_without_rendering(c_ops: Any) -> list[str]:
    """Elementwise primitives that accept complex operands but have no complex C rendering."""
    from ember._src.core import PRIMITIVES, ShapedArray
    z = ShapedArray((2,), np.dtype(np.complex64))
    params = {"round": {"rounding_method": 0}, "bitcast_convert_type": {"new_dtype": z.dtype}}
    out = []
    for name in sorted(set(c_ops.OPS) - set(c_ops.COMPLEX_OPS)):
        for args in ((z,), (z, z)):
            try:
                PRIMITIVES[name].abstract_eval(*args, **params.get(name, {}))
            except Exception:  # noqa: BLE001 - this arity or dtype is not accepted
                continue
            out.append(name)
            break
    return out


if __name__ == "__main__":
    print(render(), end="")
