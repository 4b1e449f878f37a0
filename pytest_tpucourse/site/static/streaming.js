// EX·03 streaming attention: one q block passes over the kv blocks; after each the carried
// (m, l, acc) is rescaled by e^(m_old − m). The numbers are the page's data, computed in float64.
"use strict";
(() => {
  const d = Site.data, $ = id => document.getElementById(id);
  const slider = $("step");
  slider.max = String(d.kv_blocks - 1);
  const fmt = v => (Number.isFinite(v) ? v.toFixed(3) : String(v));
  const NS = "http://www.w3.org/2000/svg";
  function blocks(container, items) {
    container.replaceChildren(...items.map(([text, cls]) => Site.el("span", { class: `blk ${cls}` }, text)));
  }
  function scores(j) {
    const svg = $("scores"), cell = 14, gap = 2, rows = d.q_rows, cols = d.kv_blocks * d.block;
    svg.setAttribute("viewBox", `0 0 ${cols * (cell + gap) + 4} ${rows * (cell + gap) + 4}`);
    svg.replaceChildren();
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
      const live = Math.floor(c / d.block) === j;
      const rect = document.createElementNS(NS, "rect");
      for (const [k, v] of Object.entries({ x: 2 + c * (cell + gap), y: 2 + r * (cell + gap), width: cell, height: cell,
        class: live ? "cell live" : "cell" })) rect.setAttribute(k, v);
      svg.append(rect);
    }
  }
  function show() {
    const j = Number(slider.value), s = d.steps[j], last = j === d.kv_blocks - 1;
    $("step-label").textContent = `step ${j + 1} of ${d.kv_blocks} · one pass over K${j}, V${j}: rescale (m, l, acc), never materializing scores to HBM`;
    const kv = [];
    for (let b = 0; b < d.kv_blocks; b++) {
      const cls = b === j ? "now" : b < j ? "done" : "";
      kv.push([`K${b}`, cls], [`V${b}`, cls]);
    }
    blocks($("hbm"), [["Q", "q"], ...kv, ["O", last ? "now" : ""]]);
    // Two buffers per operand (slots A and B): block j computes in one while block j + 1 is copied into the other.
    const slot = b => (b % 2 ? "B" : "A"), ahead = j + 1 < d.kv_blocks;
    blocks($("vmem"), [["Q (resident)", "q"],
      [`k${slot(j)}: K${j}`, "now"], [`v${slot(j)}: V${j}`, "now"],
      [`k${slot(j + 1)}: ${ahead ? `K${j + 1} (copying in)` : "free"}`, ""], [`v${slot(j + 1)}: ${ahead ? `V${j + 1} (copying in)` : "free"}`, ""],
      ["m, l, acc (carried)", ""], [`S${j} = Q·K${j}ᵀ (${d.q_rows}×${d.block}, this step only)`, ""]]);
    scores(j);
    const grid = Site.el("div", { class: "state-grid" });
    const head = ["row · m = max(m, rowmax S)", "l = l·e^(m₋−m) + rowsum e^(S−m)", "acc = acc·e^(m₋−m) + e^(S−m)·V"];
    for (const h of head) grid.append(Site.el("b", {}, h));
    for (let r = 0; r < d.q_rows; r++) {
      grid.append(Site.el("span", {}, `${r} · ${fmt(s.m[r])}`));
      grid.append(Site.el("span", { class: "rescale" }, `${fmt(s.l[r])}  (×${fmt(s.alpha[r])} carried)`));
      grid.append(Site.el("span", {}, `[${s.acc[r].map(fmt).join(", ")}]`));
    }
    $("state").replaceChildren(grid);
    if (last) {
      $("state").append(Site.el("p", {}, `out = acc / l = [${s.out[0].map(fmt).join(", ")}] … equals the full softmax(Q·Kᵀ)·V ` +
        `to ${d.max_error.toExponential(1)} (largest difference over every entry)`));
    }
    $("what").textContent = `${d.what}: ${d.q_rows} query rows, head dim ${d.head_dim}, ${d.kv_blocks} kv blocks of ${d.block} keys, ` +
      "scale 1/√d. e^(m₋−m) is the factor that rescales what was carried: 0 on the first block, 1 when the max did not move.";
  }
  slider.addEventListener("input", show);
  show();
})();
