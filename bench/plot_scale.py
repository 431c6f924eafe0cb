#!/usr/bin/env python3
"""The scale curve as a picture: bench/scale.py's --json-out files, one per size, drawn as an SVG
(standard library only; bench/README.md shows it).

  python3 bench/plot_scale.py --out bench/scale-curve.svg run-10k.json run-100k.json run-1m.json

One panel per figure (time until placement ended, server RSS, queue and health p99, mean pass time,
a pass's longest hold of the state lock), each against the number of jobs on log-log axes. The
dashed line through the smallest run's point has slope 1: a cost that grows linearly with the queue
runs along it, one that grows faster climbs above it (the "within 12x of 100k at 1M" target is
that line, 10x, plus 20 %).
"""
import argparse
import json
import math

FIGURES = (
    ("placement ended (s after the first POST)", lambda d: d.get("all_placed_s")),
    ("server RSS (MiB)", lambda d: d.get("server_rss_mib")),
    ("queue page p99 (ms)", lambda d: d.get("latency", {}).get("queue", {}).get("p99_ms")),
    ("/v1/health p99 (ms)", lambda d: d.get("latency", {}).get("health", {}).get("p99_ms")),
    ("scheduler pass, mean (ms)", lambda d: d.get("passes", {}).get("mean_ms")),
    ("longest lock hold of a pass (ms, bucket edge)",
     lambda d: max([h.get("p100_ms_at_most") or 0 for h in d.get("pass_lock_holds", {}).values()] or [0]) or None),
)
W, H, PAD = 300, 220, 48


def log_ticks(lo, hi):
    out, e = [], math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        if 10 ** e >= lo / 1.0001:
            out.append(10 ** e)
        e += 1
    return out or [lo, hi]


def panel(title, points, x0, y0):
    """An SVG group: `points` [(jobs, value)] on log-log axes with the slope-1 line from the first."""
    points = [(x, y) for x, y in points if y]
    parts = [f'<g transform="translate({x0},{y0})">',
             f'<text x="{W / 2}" y="14" text-anchor="middle" font-size="12">{title}</text>',
             f'<rect x="{PAD}" y="24" width="{W - PAD - 10}" height="{H - 24 - PAD + 10}" fill="none" stroke="#999"/>']
    if not points:
        parts.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="11">no data</text></g>')
        return "\n".join(parts)
    xs = [x for x, _ in points]
    first = points[0]
    ys = [y for _, y in points] + [first[1] * x / first[0] for x in xs]
    xlo, xhi = min(xs) / 1.5, max(xs) * 1.5
    ylo, yhi = min(ys) / 1.5, max(ys) * 1.5

    def px(x):
        return PAD + (math.log10(x) - math.log10(xlo)) / (math.log10(xhi) - math.log10(xlo)) * (W - PAD - 10)

    def py(y):
        return H - PAD + 10 - (math.log10(y) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)) * (H - 24 - PAD + 10)

    for t in log_ticks(xlo, xhi):
        parts.append(f'<text x="{px(t):.1f}" y="{H - PAD + 24}" text-anchor="middle" font-size="10">{t:,.0f}</text>')
    for t in log_ticks(ylo, yhi):
        label = f"{t:g}"
        parts.append(f'<text x="{PAD - 4}" y="{py(t) + 3:.1f}" text-anchor="end" font-size="10">{label}</text>')
        parts.append(f'<line x1="{PAD}" x2="{W - 10}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#eee"/>')
    lx = [xs[0], xs[-1]]
    parts.append(f'<line x1="{px(lx[0]):.1f}" y1="{py(first[1]):.1f}" x2="{px(lx[1]):.1f}" '
                 f'y2="{py(first[1] * lx[1] / first[0]):.1f}" stroke="#c66" stroke-dasharray="4 3"/>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, (x, y) in enumerate(points))
    parts.append(f'<path d="{path}" fill="none" stroke="#236" stroke-width="2"/>')
    for x, y in points:
        parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="#236"/>')
        value = f"{y:,.0f}" if y >= 100 else f"{y:.3g}"
        parts.append(f'<text x="{px(x) + 5:.1f}" y="{py(y) - 5:.1f}" font-size="10">{value}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 4}" text-anchor="middle" font-size="10">jobs</text></g>')
    return "\n".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="bench/scale.py --json-out files")
    ap.add_argument("--out", required=True, help="the SVG to write")
    ap.add_argument("--title", default="berth on one leader: cost against queue size")
    args = ap.parse_args()
    runs = sorted((json.load(open(f)) for f in args.runs), key=lambda d: d["jobs"])
    cols = 3
    rows = math.ceil(len(FIGURES) / cols)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{cols * W}" height="{rows * H + 50}" '
           f'font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{cols * W / 2}" y="20" text-anchor="middle" font-size="14">{args.title}</text>',
           f'<text x="{cols * W / 2}" y="38" text-anchor="middle" font-size="11" fill="#555">'
           f'{runs[0].get("nodes")} hollow nodes, mix {runs[0].get("mix", "uniform")}; dashed: linear '
           f'growth from the smallest run</text>']
    for i, (title, get) in enumerate(FIGURES):
        out.append(panel(title, [(d["jobs"], get(d)) for d in runs], (i % cols) * W, 50 + (i // cols) * H))
    out.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
