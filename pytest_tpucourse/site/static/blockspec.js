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

  // The array and the grid of blocks over it: every block edge where edges lie at least MIN_GAP
  // pixels apart; where they would not, every k-th edge, and the note says k.
  const MIN_GAP = 3;
  function grid(report) {
    const dims = report.shape.split("x").map(Number), blockDims = report.block.toLowerCase().split("x");
    if (dims.length !== 2) return Site.el("p", { class: "note" }, `grid ${JSON.stringify(report.grid)}: ` +
      `${report.grid[0]} step${report.grid[0] === 1 ? "" : "s"} along the one axis`);
    const [rows, cols] = report.grid, NS = "http://www.w3.org/2000/svg", w = 360, h = 200;
    const bh = blockDims[0] === "none" ? 1 : Number(blockDims[0]), bw = Number(blockDims[1]);
    const sx = w / (cols * bw), sy = h / (rows * bh), svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${w + 4} ${h + 4}`);
    svg.style.maxWidth = "380px";
    const shape = (tag, attrs) => {
      const n = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
      svg.append(n);
    };
    shape("rect", { x: 2, y: 2, width: cols * bw * sx, height: rows * bh * sy, class: "bs-padding" });
    shape("rect", { x: 2, y: 2, width: dims[1] * sx, height: dims[0] * sy, class: "bs-array" });
    shape("rect", { x: 2, y: 2, width: bw * sx, height: bh * sy, class: "bs-block" });
    const everyRow = Math.max(1, Math.ceil(MIN_GAP / (bh * sy))), everyCol = Math.max(1, Math.ceil(MIN_GAP / (bw * sx)));
    for (let i = everyRow; i < rows; i += everyRow)
      shape("line", { x1: 2, x2: 2 + cols * bw * sx, y1: 2 + i * bh * sy, y2: 2 + i * bh * sy, class: "bs-edge" });
    for (let j = everyCol; j < cols; j += everyCol)
      shape("line", { y1: 2, y2: 2 + rows * bh * sy, x1: 2 + j * bw * sx, x2: 2 + j * bw * sx, class: "bs-edge" });
    const wrap = Site.el("div");
    const sparse = everyRow > 1 || everyCol > 1
      ? `; ${(rows * cols).toLocaleString("en")} blocks are too many to draw each at this size: a line every ` +
        `${everyRow} block row${everyRow === 1 ? "" : "s"} and every ${everyCol} block column${everyCol === 1 ? "" : "s"}`
      : "";
    wrap.append(svg, Site.el("p", { class: "note", id: "bs-grid-note" }, `the array (solid) covered by a ` +
      `${report.grid.join(" × ")} grid of blocks, the first one filled${sparse}; shaded: the padding of the ragged edge blocks`));
    return wrap;
  }

  function showReport(report) {
    const verdict = $("bs-verdict");
    verdict.className = `big ${report.legal ? "legal" : "illegal"}`;
    verdict.textContent = report.headline;
    $("bs-lines").textContent = report.lines.join("\n");
    $("bs-grid").replaceChildren(grid(report));
    $("bs-what").textContent = `what this is: ${report.what}` + (served ? "" :
      ". This static page shows the lowering rules only; tpucourse site --serve adds the real compiler's verdict for any block.");
  }

  // While the server works: the question's state in the verdict's place, the previous answer gone.
  function showWorking(text) {
    $("bs-verdict").className = "big working";
    $("bs-verdict").textContent = text;
    $("bs-lines").textContent = "";
    $("bs-grid").replaceChildren();
  }

  async function update() {
    const ticket = ++pending;
    if (served) {
      showWorking("asking the TPU lowering and the real compiler…");
      $("bs-what").textContent = "";
      try {
        const report = await Site.api("blockspec", { shape: shape.value, block: block.value, dtype: dtype.value },
          { working: text => ticket === pending && showWorking(text), stale: () => ticket !== pending });
        if (report) showReport(report);
      } catch (err) {
        if (ticket === pending) { $("bs-verdict").className = "big illegal"; $("bs-verdict").textContent = err.message; }
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
  // Typing a shape asks once it pauses, not at every key: each question may be a compile.
  let typing = null;
  const soon = () => { clearTimeout(typing); if (served) typing = setTimeout(update, 350); else update(); };
  for (const input of [shape, block]) input.addEventListener("input", soon);
  dtype.addEventListener("change", update);
  update();
  Site.served.then(s => { served = s; if (s) update(); });
})();
