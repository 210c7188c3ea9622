// tide's SVG chart renderer, shared by the dashboard and tide simulate's
// HTML report. No dependencies; draws line and step charts with labelled
// axes, round ticks, a legend and vertical event markers.
//
//   tideChart.render(container, {
//     label: "what the chart shows",            // the SVG's accessible name
//     width: 960, height: 260,                  // width defaults to the container's
//     x: {label: "time", min, max, time: true}, // time: x in ms since the epoch
//     y: {label: "nodes", max},                 // max shared across charts
//     series: [{name, color, cls, points: [[x, y], ...], step: true, width: 1.5}],
//     markers: [{x, label, color}],
//   })
(function (root) {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) {
      if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    }
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // niceTicks returns round values from lo to hi, about n of them.
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    var raw = (hi - lo) / n;
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = mag * 10;
    var fs = [1, 2, 5, 10];
    for (var i = 0; i < fs.length; i++) {
      if (fs[i] * mag >= raw) { step = fs[i] * mag; break; }
    }
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
      out.push(Math.round(v * 1e9) / 1e9);
    }
    return out;
  }

  // timeTicks returns tick times (ms) at round clock intervals.
  function timeTicks(lo, hi, n) {
    var span = hi - lo;
    var steps = [1e3, 5e3, 15e3, 30e3, 60e3, 300e3, 900e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3];
    var step = steps[steps.length - 1];
    for (var i = 0; i < steps.length; i++) {
      if (span / steps[i] <= n) { step = steps[i]; break; }
    }
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
    return out;
  }

  function pad(n) { return n < 10 ? "0" + n : "" + n; }

  function timeLabel(ms, span) {
    var d = new Date(ms);
    var s = pad(d.getHours()) + ":" + pad(d.getMinutes());
    if (span < 300e3) s += ":" + pad(d.getSeconds());
    return s;
  }

  function numLabel(v) {
    if (Math.abs(v) >= 1e6) return (v / 1e6) + "M";
    if (Math.abs(v) >= 1e4) return (v / 1e3) + "k";
    return String(v);
  }

  // render draws the chart into container (replacing its content) and
  // returns the SVG element.
  function render(container, spec) {
    var W = Math.max(320, Math.round(spec.width || container.clientWidth || 800));
    var H = spec.height || 260;
    var left = 56, right = 16, top = 28, bottom = 44;
    var pw = W - left - right, ph = H - top - bottom;
    var series = spec.series || [];
    var xs = spec.x || {}, ys = spec.y || {};
    var xmin = xs.min, xmax = xs.max, ymax = ys.max || 0, npts = 0;
    series.forEach(function (s) {
      s.points.forEach(function (p) {
        if (xmin === undefined || p[0] < xmin) xmin = p[0];
        if (xmax === undefined || p[0] > xmax) xmax = p[0];
        if (p[1] > ymax) ymax = p[1];
        npts++;
      });
    });
    if (xmin === undefined) { xmin = 0; xmax = 1; }
    if (xmax <= xmin) xmax = xmin + (xs.time ? 60e3 : 1);
    var yticks = niceTicks(0, Math.max(ymax, 1), 5);
    var ytop = yticks[yticks.length - 1];
    if (ytop < ymax) ytop = ymax;
    var X = function (v) { return left + pw * (v - xmin) / (xmax - xmin); };
    var Y = function (v) { return top + ph * (1 - v / ytop); };

    var svg = el("svg", {"class": "chart", xmlns: NS, width: W, height: H, viewBox: "0 0 " + W + " " + H,
      role: "img", "aria-label": spec.label || "chart", "data-points": npts, "data-ymax": ytop});
    svg.appendChild(el("title", {}, spec.label || "chart"));
    svg.appendChild(el("rect", {x: left, y: top, width: pw, height: ph, fill: "none", stroke: "#bbb"}));
    yticks.forEach(function (v) {
      var y = Y(v).toFixed(1);
      svg.appendChild(el("line", {x1: left, x2: left + pw, y1: y, y2: y, stroke: "#e4e4e4"}));
      svg.appendChild(el("text", {x: left - 6, y: y, "font-size": 11, "text-anchor": "end",
        "dominant-baseline": "middle", fill: "#333"}, (ys.format || numLabel)(v)));
    });
    var xt = xs.time ? timeTicks(xmin, xmax, Math.max(2, Math.floor(pw / 90))) :
      niceTicks(xmin, xmax, Math.max(2, Math.floor(pw / 90)));
    if (xt.length < 2) xt = [xmin, xmax];
    xt.forEach(function (v) {
      var x = X(v).toFixed(1);
      svg.appendChild(el("line", {x1: x, x2: x, y1: top + ph, y2: top + ph + 4, stroke: "#555"}));
      svg.appendChild(el("text", {x: x, y: top + ph + 16, "font-size": 11, "text-anchor": "middle", fill: "#333"},
        xs.time ? timeLabel(v, xmax - xmin) : (xs.format || numLabel)(v)));
    });
    if (xs.label) {
      svg.appendChild(el("text", {"class": "axis-label x", x: left + pw / 2, y: H - 6, "font-size": 12,
        "text-anchor": "middle", fill: "#222"}, xs.label));
    }
    if (ys.label) {
      svg.appendChild(el("text", {"class": "axis-label y", x: 0, y: 0, "font-size": 12, "text-anchor": "middle",
        fill: "#222", transform: "translate(14," + (top + ph / 2) + ") rotate(-90)"}, ys.label));
    }
    (spec.markers || []).forEach(function (m) {
      if (m.x < xmin || m.x > xmax) return;
      var x = X(m.x).toFixed(1);
      var g = el("g", {"class": "marker"});
      g.appendChild(el("title", {}, m.label || ""));
      g.appendChild(el("line", {x1: x, x2: x, y1: top, y2: top + ph, stroke: m.color || "#7a3db8",
        "stroke-dasharray": "3,3", "stroke-width": 1}));
      g.appendChild(el("path", {d: "M" + x + " " + top + "l-4 -6h8z", fill: m.color || "#7a3db8"}));
      svg.appendChild(g);
    });
    series.forEach(function (s) {
      var pts = [], prev = null;
      s.points.forEach(function (p) {
        var x = X(p[0]).toFixed(1), y = Y(p[1]).toFixed(1);
        if (s.step && prev !== null) pts.push(x + "," + prev);
        pts.push(x + "," + y);
        prev = y;
      });
      if (s.step && prev !== null && s.extend !== false && s.points.length) {
        pts.push(X(xmax).toFixed(1) + "," + prev);
      }
      var attrs = {"class": s.cls || "", fill: "none", stroke: s.color, "stroke-width": s.width || 1.5,
        points: pts.join(" "), "data-n": s.points.length};
      if (s.dash) attrs["stroke-dasharray"] = s.dash;
      var line = el("polyline", attrs);
      line.appendChild(el("title", {}, s.name));
      svg.appendChild(line);
    });
    // Legend, above the plot.
    var lx = left;
    series.concat(spec.markers && spec.markers.length ? [{name: spec.markerName || "scale event",
      color: "#7a3db8", dash: "3,3", marker: true}] : []).forEach(function (s) {
      svg.appendChild(el("line", {x1: lx, x2: lx + 18, y1: 12, y2: 12, stroke: s.color, "stroke-width": 3,
        "stroke-dasharray": s.dash || ""}));
      var t = el("text", {x: lx + 22, y: 12, "font-size": 12, "dominant-baseline": "middle", fill: "#222"}, s.name);
      svg.appendChild(t);
      lx += 30 + 7 * s.name.length;
    });
    container.textContent = "";
    container.appendChild(svg);
    return svg;
  }

  root.tideChart = {render: render, niceTicks: niceTicks};
})(typeof window !== "undefined" ? window : this);
