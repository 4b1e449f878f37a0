// A chapter page: hints one at a time, and the self-test ticks (recorded only under --serve,
// as `tpucourse tick` records them: the learner's word).
"use strict";
for (const box of document.querySelectorAll(".hints")) {
  const items = [...box.querySelectorAll(".hint-list li")], button = box.querySelector(".hint-next"),
        count = box.querySelector(".hint-count");
  const update = () => {
    const open = items.filter(li => !li.hidden).length;
    count.textContent = `${open}/${items.length} hints shown`;
    button.hidden = open === items.length;
    button.textContent = open ? "next hint" : "show a hint";
  };
  button.addEventListener("click", () => { const next = items.find(li => li.hidden); if (next) next.hidden = false; update(); });
  update();
}
const ticks = [...document.querySelectorAll("input.tick")];
const tickCount = document.getElementById("tick-count"), tickNote = document.getElementById("tick-note");
Site.served.then(served => {
  for (const box of ticks) {
    box.addEventListener("change", async () => {
      if (!served) {
        box.checked = !box.checked;
        tickNote.textContent = `A static page cannot record a tick: run tpucourse tick ${box.dataset.chapter} ` +
          `${box.dataset.item}${box.checked ? " --undo" : ""}, or open the site with tpucourse site --serve.`;
        return;
      }
      const response = await fetch("api/tick", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ chapter: box.dataset.chapter, item: Number(box.dataset.item), undo: !box.checked }) });
      const answer = await response.json();
      if (!response.ok) { box.checked = !box.checked; tickNote.textContent = answer.error; return; }
      tickNote.textContent = "recorded in .tpucourse/state.json (self-reported): " + answer.printed.trim().split("\n").pop();
      tickCount.textContent = `${ticks.filter(t => t.checked).length}/${ticks.length}`;
    });
  }
});
