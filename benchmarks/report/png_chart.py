"""Line charts as PNG files with the Python standard library only (zlib + struct).

Debian's python3 has no matplotlib unless python3-matplotlib is installed; the sweep report
needs only a few line charts, so it draws them itself: a pixel canvas, lines, markers,
and text in the classic 5x7 LCD font (scaled 2x).
"""

import math
import struct
import zlib

# 5x7 font, ASCII 32..126: five column bytes per glyph, bit 0 the top row.
_FONT = bytes.fromhex(
    "0000000000" "00005f0000" "0007000700" "147f147f14" "242a7f2a12" "2313086462" "3649562050"
    "0008070300" "001c224100" "0041221c00" "2a1c7f1c2a" "08083e0808" "0080703000" "0808080808"
    "0000606000" "2010080402" "3e5149453e" "00427f4000" "7249494946" "2141494d33" "1814127f10"
    "2745454539" "3c4a494931" "4121110907" "3649494936" "464949291e" "0000140000" "0040340000"
    "0008142241" "1414141414" "0041221408" "0201590906" "3e415d594e" "7c1211127c" "7f49494936"
    "3e41414122" "7f4141413e" "7f49494941" "7f09090901" "3e41415173" "7f0808087f" "00417f4100"
    "2040413f01" "7f08142241" "7f40404040" "7f021c027f" "7f0408107f" "3e4141413e" "7f09090906"
    "3e4151215e" "7f09192946" "2649494932" "03017f0103" "3f4040403f" "1f2040201f" "3f4038403f"
    "6314081463" "0304780403" "61594d4543" "007f414141" "0204081020" "004141417f" "0402010204"
    "4040404040" "0003070800" "2054547840" "7f28444438" "3844444428" "384444287f" "3854545418"
    "00087e0902" "18a4a49c78" "7f08040478" "00447d4000" "2040403d00" "7f10284400" "00417f4000"
    "7c04780478" "7c08040478" "3844444438" "fc18242418" "18242418fc" "7c08040408" "4854545424"
    "04043f4424" "3c4040207c" "1c2040201c" "3c4030403c" "4428102844" "4c9090907c" "4464544c44"
    "0008364100" "0000770000" "0041360800" "0201020402")

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GREY = (210, 210, 210)
PALETTE = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189),
           (140, 86, 75)]


class Canvas:
    def __init__(self, width, height, background=WHITE):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            self.pixels[i:i + 3] = bytes(color)

    def rect(self, x0, y0, x1, y1, color):
        for y in range(max(0, y0), min(self.height, y1 + 1)):
            for x in range(max(0, x0), min(self.width, x1 + 1)):
                self.set(x, y, color)

    def line(self, x0, y0, x1, y1, color, width=1, dash=None):
        """A line `width` pixels thick; dash=(on, off) in pixels of length."""
        length = max(abs(x1 - x0), abs(y1 - y0), 1)
        for step in range(length + 1):
            if dash and (step % (dash[0] + dash[1])) >= dash[0]:
                continue
            x = round(x0 + (x1 - x0) * step / length)
            y = round(y0 + (y1 - y0) * step / length)
            half = width // 2
            self.rect(x - half, y - half, x - half + width - 1, y - half + width - 1, color)

    def text(self, x, y, s, color=BLACK, scale=2, align="left", vertical=False):
        """Draws `s` with its top-left at (x, y) (or centred/right-aligned by `align`)."""
        advance = 6 * scale
        total = advance * len(s) - scale
        if align == "center":
            offset = -total // 2
        elif align == "right":
            offset = -total
        else:
            offset = 0
        for n, ch in enumerate(s):
            code = ord(ch) if 32 <= ord(ch) <= 126 else ord("?")
            glyph = _FONT[(code - 32) * 5:(code - 32) * 5 + 5]
            for col, bits in enumerate(glyph):
                for row in range(8):
                    if not bits & (1 << row):
                        continue
                    for dx in range(scale):
                        for dy in range(scale):
                            u = offset + n * advance + col * scale + dx
                            v = row * scale + dy
                            if vertical:  # Rotated 90 degrees counter-clockwise.
                                self.set(x + v, y - u, color)
                            else:
                                self.set(x + u, y + v, color)

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.pixels[y * self.width * 3:(y + 1) * self.width * 3])
                       for y in range(self.height))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _nice_ticks(lo, hi, count=5):
    span = max(hi - lo, 1e-12)
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    t = first
    while True:  # Up to the first tick at or above `hi`, so every point is inside.
        ticks.append(round(t, 12))
        if t >= hi - step * 1e-9:
            return ticks
        t += step


def _label(v):
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def line_chart(path, title, x_label, y_label, series, x_log2=True, width=900, height=560):
    """series: [(name, [(x, y), ...], {"dash": (on, off) or None, "color": index})]."""
    c = Canvas(width, height)
    left, right, top, bottom = 90, width - 230, 50, height - 70
    points = [p for _, pts, _ in series for p in pts]
    if not points:
        raise ValueError(f"{path}: nothing to plot")
    fx = (lambda v: math.log2(v)) if x_log2 else (lambda v: v)
    xs = sorted({p[0] for p in points})
    x_lo, x_hi = fx(min(xs)), fx(max(xs))
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_ticks = _nice_ticks(0, max(p[1] for p in points) * 1.05 or 1)
    y_hi = y_ticks[-1]

    def px(x):
        return round(left + (fx(x) - x_lo) / (x_hi - x_lo) * (right - left))

    def py(y):
        return round(bottom - y / y_hi * (bottom - top))

    for t in y_ticks:
        c.line(left, py(t), right, py(t), GREY)
        c.text(left - 8, py(t) - 7, _label(t), align="right")
    for x in xs:
        c.line(px(x), top, px(x), bottom, GREY)
        c.text(px(x), bottom + 8, _label(x), align="center")
    c.line(left, bottom, right, bottom, BLACK, 2)
    c.line(left, top, left, bottom, BLACK, 2)
    c.text((left + right) // 2, 12, title, align="center", scale=3)
    c.text((left + right) // 2, bottom + 34, x_label, align="center")
    c.text(18, (top + bottom) // 2, y_label, align="center", vertical=True)

    for n, (name, pts, style) in enumerate(series):
        color = PALETTE[style.get("color", n) % len(PALETTE)]
        pts = sorted(pts)
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            c.line(px(x0), py(y0), px(x1), py(y1), color, 3, style.get("dash"))
        for x, y in pts:
            c.rect(px(x) - 4, py(y) - 4, px(x) + 4, py(y) + 4, color)
        ly = top + 10 + n * 26
        c.line(right + 20, ly + 7, right + 60, ly + 7, color, 3, style.get("dash"))
        c.text(right + 68, ly, name)
    with open(path, "wb") as f:
        f.write(c.png())
