#!/usr/bin/env python3
"""font_widths.py: the advance widths of printable ASCII in a TrueType font,
as the C table viz/font.c measures text with.

Reads the font's 'head' (unitsPerEm), 'hhea' (numberOfHMetrics), 'hmtx'
(advance widths) and 'cmap' (format 4, the Unicode BMP subtable) with the
standard library only, and prints, for the characters 32..126, each advance
in thousandths of an em (rounded up, so that a measured width is never
short), ten to a line, ready to paste.

Usage:
  python3 tools/font_widths.py /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
  python3 tools/font_widths.py /usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf
"""
import math
import struct
import sys


def tables(data):
    n = struct.unpack(">H", data[4:6])[0]
    out = {}
    for i in range(n):
        tag, _, off, length = struct.unpack(">4sIII", data[12 + 16 * i:28 + 16 * i])
        out[tag.decode("latin-1")] = data[off:off + length]
    return out


def cmap4(cmap):
    n = struct.unpack(">H", cmap[2:4])[0]
    for i in range(n):
        plat, enc, off = struct.unpack(">HHI", cmap[4 + 8 * i:12 + 8 * i])
        if (plat, enc) in ((3, 1), (0, 3)) and struct.unpack(">H", cmap[off:off + 2])[0] == 4:
            t = cmap[off:]
            segx2 = struct.unpack(">H", t[6:8])[0]
            seg = segx2 // 2
            ends = struct.unpack(">%dH" % seg, t[14:14 + segx2])
            starts = struct.unpack(">%dH" % seg, t[16 + segx2:16 + 2 * segx2])
            deltas = struct.unpack(">%dh" % seg, t[16 + 2 * segx2:16 + 3 * segx2])
            ro_at = 16 + 3 * segx2
            ranges = struct.unpack(">%dH" % seg, t[ro_at:ro_at + segx2])

            def glyph(c):
                for k in range(seg):
                    if starts[k] <= c <= ends[k]:
                        if ranges[k] == 0:
                            return (c + deltas[k]) & 0xFFFF
                        at = ro_at + 2 * k + ranges[k] + 2 * (c - starts[k])
                        g = struct.unpack(">H", t[at:at + 2])[0]
                        return (g + deltas[k]) & 0xFFFF if g else 0
                return 0
            return glyph
    sys.exit("no format-4 Unicode cmap")


def main():
    data = open(sys.argv[1], "rb").read()
    t = tables(data)
    upem = struct.unpack(">H", t["head"][18:20])[0]
    n_hm = struct.unpack(">H", t["hhea"][34:36])[0]
    glyph = cmap4(t["cmap"])

    def advance(g):
        g = min(g, n_hm - 1)
        return struct.unpack(">H", t["hmtx"][4 * g:4 * g + 2])[0]

    w = [math.ceil(advance(glyph(c)) * 1000 / upem) for c in range(32, 127)]
    print("/* %s, unitsPerEm %d: characters 32..126 */" % (sys.argv[1].split("/")[-1], upem))
    for i in range(0, len(w), 10):
        print("    " + ", ".join("%d" % x for x in w[i:i + 10]) + ",")


if __name__ == "__main__":
    main()
