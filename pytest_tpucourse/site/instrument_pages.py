"""The instruments' page bodies: their fields and drawing areas. Their scripts (static/*.js) draw
from the data each page embeds, or from the local server's answers under `--serve`."""

from __future__ import annotations

ROOFLINE = """
<section class="panel controls">
<label>chip <select id="chip"></select></label>
<label>op <select id="op"><option value="matmul">matmul (MxKxN)</option><option value="add">add (MxN)</option></select></label>
<label>shape <input id="shape" value="8x4096x4096" spellcheck="false"></label>
<label>dtype <select id="dtype"></select></label>
</section>
<section class="panel readout">
<p class="big">floor <b id="floor">…</b></p>
<p id="detail"></p><p class="note" id="figures"></p>
<p class="note">roofline prediction: max(FLOPs / peak, HBM bytes / bandwidth), each operand read once and the
result written once (pytest_tpucourse/roofline.py); the chip's figures are one JAX device's (chips.py). A
prediction, never a measurement.</p>
</section>
<section class="panel"><svg id="plot" viewBox="0 0 640 380" role="img" aria-label="roofline"></svg>
<p class="note">drag the orange point across the ridge: it sets the shape's last dimensions, and the floor follows.</p></section>
"""

STREAMING = """
<section class="panel controls">
<label>walk <select id="variant"></select></label>
<label>kv block <input id="step" type="range" min="0" value="0"></label> <span id="step-label"></span>
</section>
<section class="panel"><div class="attn">
<div><h3>HBM</h3><div id="hbm" class="blocks"></div></div>
<div><h3>VMEM (resident now)</h3><div id="vmem" class="blocks"></div>
<p class="note">two buffers per operand: the pipeline copies block j + 1 in while block j computes</p></div>
<div><h3>score matrix S = Q·Kᵀ</h3><svg id="scores" viewBox="0 0 260 90"></svg>
<p class="note">an outline only: one block's scores live in VMEM for one step, then go; the whole matrix never exists</p></div>
</div></section>
<section class="panel"><h3>carried state after this block</h3><div id="state"></div>
<p class="note" id="what"></p></section>
"""

XRAY = """
<section class="panel"><p class="note">The same page <code>tpucourse xray FILE.py:function --html</code> writes
(pytest_tpucourse/instruments/xray_page.py, xray.py), of one dense layer: hover an op and its counterparts light up
in the other two layers. The optimized HLO is this machine's XLA, as the page's first line says.</p>
<iframe id="xray" src="xray.html" title="the IR x-ray"></iframe></section>
"""

BLOCKSPEC = """
<section class="panel controls">
<label>array shape <input id="bs-shape" list="bs-shapes" value="1000x384" spellcheck="false"></label>
<label>block <input id="bs-block" list="bs-blocks" value="128x128" spellcheck="false"></label>
<label>dtype <select id="bs-dtype"></select></label>
<datalist id="bs-shapes"></datalist><datalist id="bs-blocks"></datalist>
</section>
<section class="panel"><p class="big" id="bs-verdict"></p><div id="bs-grid"></div><pre id="bs-lines"></pre>
<p class="note" id="bs-what"></p></section>
"""

TIMELINE = """
<section class="panel controls">
<label>schedule <select id="tl-schedule"></select></label>
<label>devices <select id="tl-devices"></select></label>
<label><input type="checkbox" id="tl-mine"> your simulate() (exercises/ch14/timeline.py)</label>
<button type="button" id="tl-back">← round</button> <button type="button" id="tl-step">round →</button>
<span id="tl-round"></span>
<p id="tl-mine-status" role="status" hidden></p>
</section>
<section class="panel"><p id="tl-doc"></p><div id="tl-table"></div><p class="big" id="tl-summary"></p>
<p class="note" id="tl-what"></p></section>
"""

MESH = """
<section class="panel controls">
<label>chip <select id="mesh-chip"></select></label>
<label>topology <input id="topology" value="4x4" list="mesh-topologies" spellcheck="false"></label>
<datalist id="mesh-topologies"></datalist>
<label>collective <select id="mesh-op"></select></label>
<label>array <select id="mesh-bytes"></select></label>
<label>step <input id="mesh-step" type="range" min="0" value="0"></label> <span id="mesh-step-label"></span>
</section>
<section class="panel"><svg id="mesh" viewBox="0 0 640 360" role="img" aria-label="the mesh"></svg>
<div id="mesh-phases"></div><p class="big" id="mesh-total"></p><p class="note" id="mesh-what"></p></section>
"""

BODIES = {"ex01": (ROOFLINE, "roofline.js"), "ex03": (STREAMING, "streaming.js"), "ex05": (XRAY, None),
          "ex09": (BLOCKSPEC, "blockspec.js"), "ex10": (TIMELINE, "timeline.js"), "ex11": (MESH, "mesh.js")}
