/*
 * font.h: how wide a piece of text is in the pictures' font.
 *
 * The SVG pictures name "DejaVu Sans, Verdana, sans-serif".  Layout that
 * must know a text's width (a micro-batch number inside its box, a legend
 * entry before the line wraps) measures it with DejaVu Sans's own advance
 * widths (tools/font_widths.py read them from DejaVuSans.ttf and
 * DejaVuSans-Bold.ttf).  Verdana's are the same for digits (0.637 em) and
 * close elsewhere, and the usual fallbacks (Arial, Helvetica, Liberation
 * Sans) are narrower, so a text measured to fit does fit in any of them.
 * Characters outside printable ASCII count one em, more than any of them
 * takes.  Workload: a few thousand labels per picture.
 */
#ifndef ZB_VIZ_FONT_H
#define ZB_VIZ_FONT_H

/* The font-family attribute value the pictures use. */
#define VIZ_FONT_FAMILY "DejaVu Sans, Verdana, sans-serif"

/* Width in px of the UTF-8 text at font size `size` px, regular (bold 0)
 * or bold (bold 1). */
double viz_text_width(const char *text, double size, int bold);

#endif
