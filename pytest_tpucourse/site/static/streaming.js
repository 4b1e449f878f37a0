// EX·03 streaming attention: one q block passes over the kv blocks; after each the carried
// (m, l, acc) is rescaled by e^(m_old − m). The numbers are the page's data, computed in float64.
"use strict";
(() => {
  const $ = id => document.getElementById(id), slider = $("step"), variant = $("variant");
  for (const [name, v] of Object.entries(Site.data.variants)) variant.append(new Option(v.label, name, false, name === Site.data.default));
  let d = Site.data.variants[variant.value];
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
      const live = Math.floor(c / d.block) === j && !d.steps[j].skipped, masked = !d.allowed[r][c];
      const rect = document.createElementNS(NS, "rect");
      for (const [k, v] of Object.entries({ x: 2 + c * (cell + gap), y: 2 + r * (cell + gap), width: cell, height: cell,
        class: `cell${live ? " live" : ""}${masked ? " masked" : ""}` })) rect.setAttribute(k, v);
      svg.append(rect);
    }
  }
  function show() {
    const j = Number(slider.value), s = d.steps[j], last = j === d.kv_blocks - 1;
    $("step-label").textContent = s.skipped
      ? `step ${j + 1} of ${d.kv_blocks} · K${j}, V${j} lie wholly above the diagonal: never fetched (the index map clamps), never computed (pl.when)`
      : `step ${j + 1} of ${d.kv_blocks} · one pass over K${j}, V${j}: rescale (m, l, acc), never materializing scores to HBM`;
    const kv = [];
    for (let b = 0; b < d.kv_blocks; b++) {
      const cls = d.steps[b].skipped ? "skip" : b === j ? "now" : b < j ? "done" : "";
      kv.push([`K${b}`, cls], [`V${b}`, cls]);
    }
    blocks($("hbm"), [["Q", "q"], ...kv, ["O", last ? "now" : ""]]);
    // Two buffers per operand (slots A and B): block j computes in one while the next block is copied into the other.
    const slot = b => (b % 2 ? "B" : "A"), nextFetched = d.steps.findIndex((x, b) => b > j && !x.skipped);
    const ahead = nextFetched > j ? `K${nextFetched} (copying in)` : "free", aheadV = nextFetched > j ? `V${nextFetched} (copying in)` : "free";
    blocks($("vmem"), s.skipped
      ? [["Q (resident)", "q"], ["no copy, no compute this step", "skip"], ["m, l, acc (carried, unchanged)", ""]]
      : [["Q (resident)", "q"], [`k${slot(j)}: K${j}`, "now"], [`v${slot(j)}: V${j}`, "now"],
         [`k${slot(j + 1)}: ${ahead}`, ""], [`v${slot(j + 1)}: ${aheadV}`, ""],
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
        `${d.causal ? "(causal) " : ""}to ${d.max_error.toExponential(1)} (largest difference over every entry)`));
    }
    $("what").textContent = `${d.what}: ${d.q_rows} query rows, head dim ${d.head_dim}, ${d.kv_blocks} kv blocks of ${d.block} keys, ` +
      `scale 1/√d${d.causal ? `, causal: queries ${d.q_block * d.q_rows}..${d.q_block * d.q_rows + d.q_rows - 1} see keys up to their own position` : ""}. e^(m₋−m) is the factor that rescales what was carried: 0 on the first block, 1 when the max did not move.`;
  }
  function pick() {
    d = Site.data.variants[variant.value];
    slider.max = String(d.kv_blocks - 1);
    slider.value = "0";
    show();
  }
  slider.addEventListener("input", show);
  variant.addEventListener("change", pick);
  pick();
})();
