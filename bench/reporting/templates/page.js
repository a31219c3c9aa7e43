// Sort any table by a header click; filter the summary by method; open a row's drill-down.
"use strict";
function sortBy(th) {
  const table = th.closest("table"), body = table.tBodies[0], index = th.cellIndex;
  const descending = th.getAttribute("aria-sort") === "ascending";
  for (const other of th.parentNode.children) other.setAttribute("aria-sort", "none");
  th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  const key = (row) => row.cells[index].dataset.sort;
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
    const order = (x === "") - (y === "") ||
      (!isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y, undefined, {numeric: true}));
    return descending ? -order : order;
  });
  for (const row of rows) body.appendChild(row);
}
document.querySelectorAll("table.sortable th").forEach((th) => {
  th.addEventListener("click", () => sortBy(th));
  th.addEventListener("keydown", (e) => { if (e.key === "Enter") sortBy(th); });
});
document.querySelectorAll("input.filter").forEach((input) => {
  input.addEventListener("input", () => {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    const table = document.getElementById(input.dataset.table);
    for (const row of table.tBodies[0].rows)
      row.hidden = !words.every((w) => row.dataset.filter.includes(w));
  });
});
function openTarget() {
  const target = location.hash && document.getElementById(location.hash.slice(1));
  if (target && target.tagName === "DETAILS") { target.open = true; target.scrollIntoView(); }
}
document.querySelectorAll("a.drill").forEach((a) => a.addEventListener("click", () => setTimeout(openTarget)));
window.addEventListener("hashchange", openTarget);
openTarget();
