"""Server-rendered SVG charts for the billing page: no script, no build step.

Each function takes numbers already computed by a selector and returns SVG markup
(text escaped). Colors are the Dash's CSS variables, so light and dark themes follow.
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

PALETTE = ["var(--accent)", "var(--violet)", "var(--ok)", "var(--warn)", "var(--info)", "var(--bad)", "var(--muted)"]


def usd(micros: int, places: int = 2) -> str:
    sign = "-" if micros < 0 else ""
    return f"{sign}${abs(micros) / 1_000_000:,.{places}f}"


def color_of(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def spend_per_day(chart: dict, *, width: int = 760, height: int = 220) -> SafeString:
    """Stacked bars: one per day, one segment per runtime; hover titles give the amounts."""
    days, runtimes, series = chart["days"], chart["runtimes"], chart["series"]
    left, bottom, top = 56, 22, 10
    plot_w, plot_h = width - left - 8, height - bottom - top
    totals = [sum(series[r][i] for r in runtimes) for i in range(len(days))]
    peak = max(totals, default=0) or 1
    step = plot_w / max(len(days), 1)
    bar = max(step * 0.72, 1)
    parts = [
        f'<svg class="chart" id="spend-chart" role="img" viewBox="0 0 {width} {height}" width="100%" '
        f'preserveAspectRatio="xMidYMid meet" aria-label="{escape("Spend per day, last 30 days")}">'
    ]
    for fraction in (0, 0.5, 1):
        y = top + plot_h - plot_h * fraction
        parts.append(f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="var(--border)"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="var(--muted)">'
            f"{escape(usd(round(peak * fraction)))}</text>"
        )
    for i, day in enumerate(days):
        x = left + i * step + (step - bar) / 2
        y = top + plot_h
        for index, runtime in enumerate(runtimes):
            value = series[runtime][i]
            if value <= 0:
                continue
            h = plot_h * value / peak
            y -= h
            parts.append(
                f'<rect class="bar" data-day="{day.isoformat()}" data-runtime="{escape(runtime)}" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar:.1f}" height="{max(h, 0.5):.1f}" fill="{color_of(index)}">'
                f"<title>{day.isoformat()} · {escape(runtime)} · {escape(usd(value, 4))}</title></rect>"
            )
        if i % 5 == 0 or i == len(days) - 1:
            parts.append(
                f'<text x="{left + i * step + step / 2:.1f}" y="{height - 6}" text-anchor="middle" font-size="11" '
                f'fill="var(--muted)">{day.strftime("%m-%d")}</text>'
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text piece above is escaped


def spend_per_runtime(rows: list[dict], runtimes: list[str], *, width: int = 360) -> SafeString:
    """Horizontal bars, one per runtime, colored as in the daily chart."""
    row_h = 26
    height = max(len(rows), 1) * row_h + 4
    peak = max((r["micros"] for r in rows), default=0) or 1
    label_w, value_w = 100, 76
    plot_w = width - label_w - value_w
    parts = [
        f'<svg class="chart" id="runtime-chart" role="img" viewBox="0 0 {width} {height}" width="100%" '
        f'aria-label="{escape("Spend per runtime, last 30 days")}">'
    ]
    for i, row in enumerate(rows):
        y = i * row_h + 4
        w = max(plot_w * row["micros"] / peak, 1)
        color = color_of(runtimes.index(row["runtime"]) if row["runtime"] in runtimes else i)
        parts.append(
            f'<text x="0" y="{y + 15}" font-size="12" fill="var(--text)">{escape(row["runtime"][:16])}</text>'
            f'<rect class="bar" data-runtime="{escape(row["runtime"])}" x="{label_w}" y="{y + 3}" width="{w:.1f}" '
            f'height="16" rx="2" fill="{color}"><title>{escape(row["runtime"])} · {escape(usd(row["micros"], 4))}</title></rect>'
            f'<text x="{width}" y="{y + 15}" text-anchor="end" font-size="12" fill="var(--muted)">'
            f"{escape(usd(row['micros']))}</text>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text piece above is escaped
