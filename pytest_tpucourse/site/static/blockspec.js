// EX·09 the BlockSpec sandbox. The static build shows the TPU lowering's rules only, for the cases
// precomputed by blockspecs.sandbox; under --serve every block is answered live, with the real
// compiler's verdict (libtpu) as well.
"use strict";
(() => {
  const d = Site.data, $ = id => document.getElementById(id);
  const shape = $("bs-shape"), block = $("bs-block"), dtype = $("bs-dtype");
  for (const t of d.dtypes) dtype.append(new Option(t, t));
  for (const s of d.shapes) $("bs-shapes").append(new Option(s));
  for (const b of d.blocks) $("bs-blocks").append(new Option(b));
  const norm = t => t.trim().toLowerCase().replace(/×/g, "x").replace(/_/g, "none");
  const key = (s, b, t) => `${norm(s)}|${norm(b)}|${t}`;
  const cases = new Map(d.cases.map(c => [key(c.shape, c.block, c.dtype), c]));
  let served = false, pending = 0;

  function grid(report) {
    const dims = report.shape.split("x").map(Number), blockDims = report.block.toLowerCase().split("x");
    if (dims.length !== 2) return Site.el("p", { class: "note" }, `grid ${JSON.stringify(report.grid)}`);
    const [rows, cols] = report.grid, NS = "http://www.w3.org/2000/svg", w = 360, h = 200;
    const bh = blockDims[0] === "none" ? 1 : Number(blockDims[0]), bw = Number(blockDims[1]);
    const sx = w / (cols * bw), sy = h / (rows * bh), svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${w + 4} ${h + 4}`);
    svg.style.maxWidth = "380px";
    const rect = (x, y, width, height, style) => {
      const r = document.createElementNS(NS, "rect");
      for (const [k, v] of Object.entries({ x: x + 2, y: y + 2, width, height, style })) r.setAttribute(k, v);
      svg.append(r);
    };
    rect(0, 0, cols * bw * sx, rows * bh * sy, "fill:#fde8d7;stroke:#c2410c;stroke-dasharray:3 2");
    rect(0, 0, dims[1] * sx, dims[0] * sy, "fill:#fff;stroke:#1d1a16");
    if (rows * cols <= 400) for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++)
      rect(j * bw * sx, i * bh * sy, bw * sx, bh * sy, "fill:none;stroke:#9a8f7c;stroke-width:.6");
    const wrap = Site.el("div");
    wrap.append(svg, Site.el("p", { class: "note" }, `the array (solid) covered by a ${report.grid.join(" × ")} grid of blocks; ` +
      "shaded: the padding of the ragged edge blocks"));
    return wrap;
  }

  function showReport(report) {
    const verdict = $("bs-verdict");
    verdict.className = `big ${report.legal ? "legal" : "illegal"}`;
    verdict.textContent = report.lines[1].replace(/^verdict\s+/, "");
    $("bs-lines").textContent = report.lines.join("\n");
    $("bs-grid").replaceChildren(grid(report));
    $("bs-what").textContent = `what this is: ${report.what}` + (served ? "" :
      ". This static page shows the lowering rules only; tpucourse site --serve adds the real compiler's verdict for any block.");
  }

  async function update() {
    const ticket = ++pending;
    if (served) {
      $("bs-what").textContent = "asking the TPU lowering and the real compiler…";
      try {
        const report = await Site.api("blockspec", { shape: shape.value, block: block.value, dtype: dtype.value });
        if (ticket === pending) showReport(report);
      } catch (err) {
        if (ticket === pending) { $("bs-verdict").textContent = err.message; $("bs-lines").textContent = ""; }
      }
      return;
    }
    const found = cases.get(key(shape.value, block.value, dtype.value));
    if (found) { showReport(found); return; }
    $("bs-verdict").className = "big";
    $("bs-verdict").textContent = "not precomputed in this static build";
    $("bs-lines").textContent = `tpucourse blockspec --shape ${shape.value} --block ${block.value} --dtype ${dtype.value}\n` +
      "answers it in a terminal; tpucourse site --serve answers it here. Precomputed: the shapes and blocks of the fields' lists.";
    $("bs-grid").replaceChildren();
  }
  for (const input of [shape, block]) input.addEventListener("input", update);
  dtype.addEventListener("change", update);
  update();
  Site.served.then(s => { served = s; if (s) update(); });
})();
