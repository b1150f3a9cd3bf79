// The fixed parts of reprise-dump's HTML view (dump_view.cc puts the JSON dump between them): a
// page with no external resource. Nodes are listed by group (the first two parts of their dotted
// names), the search box filters by name or op, and a node's panel links to its inputs and
// consumers, with its outputs, attributes, fused nodes and, in a plan, its launch and lane.
#ifndef REPRISE_SRC_TOOLS_DUMP_VIEW_HTML_H_
#define REPRISE_SRC_TOOLS_DUMP_VIEW_HTML_H_

namespace reprise::tools {

inline constexpr const char kDumpHtmlHead[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";

inline constexpr const char kDumpHtmlStyle[] = R"html(<style>
body { font: 14px sans-serif; margin: 0 1em; }
#main { display: flex; gap: 1em; align-items: flex-start; }
#list { flex: 1; max-height: 85vh; overflow: auto; border: 1px solid #ccc; padding: .5em; }
#detail { flex: 1; position: sticky; top: 0; max-height: 85vh; overflow: auto; }
#q { width: 30em; font-size: 14px; margin: .5em 0; }
summary { cursor: pointer; font-weight: bold; }
a { cursor: pointer; color: #0645ad; text-decoration: none; display: block; }
a.sel { background: #ffe9a8; }
.op { color: #666; } .fused { color: #b35c00; }
table { border-collapse: collapse; } td { padding: 1px 6px; vertical-align: top; }
</style>
)html";

inline constexpr const char kDumpHtmlBody[] = R"html(<p id="summary"></p>
<input id="q" placeholder="filter by name or op (e.g. layer3.2 or conv)" autofocus>
<div id="main"><div id="list"></div><div id="detail">Click a node.</div></div>
)html";

inline constexpr const char kDumpHtmlScript[] = R"html(<script>
"use strict";
const dump = JSON.parse(document.getElementById("dump").textContent);
const nodes = dump.nodes || [];
const consumers = nodes.map(() => []);
nodes.forEach(n => (n.inputs || []).forEach(v => consumers[v.node].push(n.id)));
const launchOf = {};
((dump.plan && dump.plan.launches) || []).forEach(l => { launchOf[l.node] = l; });
const group = name => name.split(".").slice(0, 2).join(".");
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"})[c]);
const shape = o => o.dtype + "[" + o.shape.join(", ") + "]";
document.getElementById("summary").textContent = "stage " + dump.stage + ": " + nodes.length +
  " nodes, " + (dump.parameter_count || 0).toLocaleString() + " parameter elements" +
  (dump.plan ? ", " + dump.plan.launches.length + " launches" : "");
function link(id) {
  const n = nodes[id];
  return "<a data-id=\"" + id + "\">" + esc(n.name) + " <span class=\"op\">" + esc(n.op) + "</span></a>";
}
function render(filter) {
  const groups = new Map();
  nodes.forEach(n => {
    if (filter && !n.name.includes(filter) && !n.op.includes(filter)) return;
    const g = group(n.name);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(n.id);
  });
  let html = "";
  groups.forEach((ids, g) => {
    html += "<details" + (filter && groups.size <= 20 ? " open" : "") + "><summary>" + esc(g) +
      " (" + ids.length + ")</summary>" + ids.map(link).join("") + "</details>";
  });
  document.getElementById("list").innerHTML = html || "nothing matches";
}
function show(id) {
  const n = nodes[id];
  document.querySelectorAll("a.sel").forEach(a => a.classList.remove("sel"));
  document.querySelectorAll("#list a[data-id=\"" + id + "\"]").forEach(a => {
    a.classList.add("sel");
    a.closest("details").open = true;
    a.scrollIntoView({block: "nearest"});
  });
  const rows = [["op", esc(n.op)], ["id", n.id],
    ["outputs", (n.outputs || []).map(shape).map(esc).join("<br>")]];
  const l = launchOf[n.id];
  if (l) rows.push(["launch", l.index + " on lane " + l.lane + (l.waits.length ? ", waits for " + l.waits.join(", ") : "")]);
  Object.entries(n.attrs || {}).forEach(([k, v]) => rows.push([esc(k), esc(JSON.stringify(v))]));
  if (n.init) rows.push(["init", esc(JSON.stringify(n.init))]);
  if ((n.fused_nodes || []).length) rows.push(["fuses", "<span class=\"fused\">" + n.fused_nodes.map(esc).join("<br>") + "</span>"]);
  rows.push(["inputs", (n.inputs || []).map(v => link(v.node)).join("") || "none"]);
  if ((n.control_inputs || []).length) rows.push(["after", n.control_inputs.map(link).join("")]);
  rows.push(["consumers", consumers[id].map(link).join("") || "none"]);
  document.getElementById("detail").innerHTML = "<h2>" + esc(n.name) + "</h2><table>" +
    rows.map(r => "<tr><td>" + r[0] + "</td><td>" + r[1] + "</td></tr>").join("") + "</table>";
}
document.addEventListener("click", e => {
  const a = e.target.closest("a[data-id]");
  if (a) show(Number(a.dataset.id));
});
document.getElementById("q").addEventListener("input", e => render(e.target.value.trim()));
render("");
</script>
)html";

}  // namespace reprise::tools

#endif  // REPRISE_SRC_TOOLS_DUMP_VIEW_HTML_H_
