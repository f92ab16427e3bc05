// A bar chart as inline SVG (no library): one bar per day.
const NS = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

// points: [[label, value], ...]
export function barChart(points, { title = "", height = 160, id } = {}) {
  const w = Math.max(320, points.length * 28 + 40);
  const top = Math.max(1, ...points.map(([, v]) => v));
  const svg = el("svg", { viewBox: `0 0 ${w} ${height + 40}`, width: w, height: height + 40, role: "img", class: "chart", ...(id ? { id } : {}) });
  svg.append(el("title", {}, title));
  svg.append(el("line", { x1: 30, y1: height + 5, x2: w, y2: height + 5, class: "axis" }));
  svg.append(el("text", { x: 0, y: 12, class: "tick" }, top));
  points.forEach(([label, v], i) => {
    const bh = Math.round((v / top) * (height - 10));
    const x = 36 + i * 28;
    const bar = el("rect", { x, y: height + 5 - bh, width: 20, height: bh, class: "barrect" });
    bar.append(el("title", {}, `${label}: ${v}`));
    svg.append(bar);
    svg.append(el("text", { x: x + 10, y: height + 20, class: "tick", "text-anchor": "middle" }, label.slice(5)));
  });
  return svg;
}

// Stacked bars: one bar per label, one segment per series (class `seg-<series>`), with a
// legend. stacks: [[label, {series: value, ...}], ...]; series: the order of segments.
export function stackedChart(stacks, series, { title = "", height = 160, id } = {}) {
  const w = Math.max(320, stacks.length * 28 + 40);
  const total = (parts) => series.reduce((n, s) => n + (parts[s] || 0), 0);
  const top = Math.max(1, ...stacks.map(([, parts]) => total(parts)));
  const svg = el("svg", { viewBox: `0 0 ${w} ${height + 58}`, width: w, height: height + 58, role: "img", class: "chart", ...(id ? { id } : {}) });
  svg.append(el("title", {}, title));
  svg.append(el("line", { x1: 30, y1: height + 5, x2: w, y2: height + 5, class: "axis" }));
  svg.append(el("text", { x: 0, y: 12, class: "tick" }, top));
  stacks.forEach(([label, parts], i) => {
    const x = 36 + i * 28;
    let y = height + 5;
    for (const s of series) {
      const v = parts[s] || 0;
      if (!v) continue;
      const bh = Math.max(1, Math.round((v / top) * (height - 10)));
      y -= bh;
      const seg = el("rect", { x, y, width: 20, height: bh, class: `barrect seg-${s}` });
      seg.append(el("title", {}, `${label} ${s}: ${v}`));
      svg.append(seg);
    }
    svg.append(el("text", { x: x + 10, y: height + 20, class: "tick", "text-anchor": "middle" }, label.slice(5)));
  });
  series.forEach((s, i) => {
    const x = 36 + i * 96;
    svg.append(el("rect", { x, y: height + 32, width: 10, height: 10, class: `barrect seg-${s}` }));
    svg.append(el("text", { x: x + 14, y: height + 41, class: "tick legend" }, s));
  });
  return svg;
}
