"""Exercise ch12.xray: the IR x-ray, one program at three layers linked op to op.

three_layers(fn, *args) -> (closed_jaxpr, stablehlo_text, hlo_text)
    The jaxpr of fn on args (jax.make_jaxpr), the StableHLO of jax.jit(fn) lowered on
    args and printed with its locations (as_text(debug_info=True)), and the optimized
    HLO of that lowering compiled (.compile().as_text()). The locations must be the
    source's current ones: the persistent compilation cache keys a program without
    its locations unless jax_compilation_cache_include_metadata_in_key is True, so a
    compile of moved code can return the old lines. Leave JAX's settings as you found them.

xray(jaxpr, stablehlo, hlo) -> list[dict]
    One row per executed equation of the ClosedJaxpr `jaxpr`, in program order. An
    equation whose primitive is jit, pjit, closed_call, custom_jvp_call,
    custom_vjp_call or checkpoint is not a row: the equations of the jaxpr in its params
    are, recursively. Every other equation is a row (a pallas_call's kernel and control
    flow bodies are not entered). Each row is a dict:
        primitive   the equation's primitive name, "dot_general"
        file, line  its innermost user frame:
                    jax._src.source_info_util.user_frame(eqn.source_info.traceback);
                    an equation with none (the body of a library's jit) takes the
                    location of the call equation it was flattened from
        stablehlo   the distinct names ("stablehlo.dot_general") of the StableHLO ops made
                    from it, in order of first appearance (graded in any order)
        hlo         the distinct names (without "%") of the ENTRY instructions of the
                    optimized HLO that run what was made from it, in ENTRY order (any order)
    "Made from it": the ops whose location has the equation's (file, line, column) and
    whose op name ends with "/<primitive>"; when no op at that location has the name,
    every op at that location. A StableHLO op's location is its trailing loc(...)
    resolved through the #loc table (a name "jit(f)/add"(...) is the op name; a
    callsite(A at B) goes on with A; "file":line:col is the location); an op whose
    region follows it carries its loc on the closing "} loc(...)". A library's jit
    (jax.nn.relu) is a private function, `func.func private @relu`, run from main by
    `%0 = call @relu(...) loc(...)`: its ops' locs name no file (loc("max")), and such an
    op is at the places of the calls that run its function. An HLO instruction's
    is its metadata: op_name, and stack_frame_id -> StackFrames -> FileLocations ->
    FileNames. An ENTRY instruction runs what it is, and what the computations it calls
    hold (calls=, to_apply=, body=, condition=), recursively.
"""

import re

import jax


def three_layers(fn, *args):
    """(closed jaxpr, StableHLO text with locations, optimized HLO text) of jax.jit(fn) on args."""
    raise NotImplementedError("write three_layers(): make_jaxpr, lower(...).as_text(debug_info=True), compile()")


def xray(jaxpr, stablehlo: str, hlo: str) -> list[dict]:
    """One row per executed equation: primitive, file, line, stablehlo ops, ENTRY instructions."""
    raise NotImplementedError("write xray(): locations of each layer, then link rows by (file, line, column)")
