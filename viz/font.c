/*
 * font.c: text widths from DejaVu Sans's advance widths (font.h).
 *
 * The tables are thousandths of an em for the characters 32..126, rounded
 * up, exactly as `python3 tools/font_widths.py FONT.ttf` prints them for
 * DejaVuSans.ttf and DejaVuSans-Bold.ttf (unitsPerEm 2048).  Kerning is
 * ignored: it only ever narrows a pair, so the sum is an upper bound.
 */
#include "viz/font.h"

static const unsigned short dejavu_regular[95] = {
    /* DejaVuSans.ttf, unitsPerEm 2048: characters 32..126 */
    318, 401, 460, 838, 637, 951, 780, 275, 391, 391,
    500, 838, 318, 361, 318, 337, 637, 637, 637, 637,
    637, 637, 637, 637, 637, 637, 337, 337, 838, 838,
    838, 531, 1000, 685, 687, 699, 771, 632, 576, 775,
    752, 295, 295, 656, 558, 863, 749, 788, 604, 788,
    695, 635, 611, 732, 685, 989, 686, 611, 686, 391,
    337, 391, 838, 500, 500, 613, 635, 550, 635, 616,
    353, 635, 634, 278, 278, 580, 278, 975, 634, 612,
    635, 635, 412, 521, 393, 634, 592, 818, 592, 592,
    525, 637, 337, 637, 838,
};

static const unsigned short dejavu_bold[95] = {
    /* DejaVuSans-Bold.ttf, unitsPerEm 2048: characters 32..126 */
    349, 457, 521, 838, 696, 1002, 873, 307, 458, 458,
    523, 838, 380, 416, 380, 366, 696, 696, 696, 696,
    696, 696, 696, 696, 696, 696, 400, 400, 838, 838,
    838, 581, 1000, 774, 763, 734, 831, 684, 684, 821,
    837, 373, 373, 775, 638, 996, 837, 851, 733, 851,
    771, 721, 683, 813, 774, 1104, 771, 725, 726, 458,
    366, 458, 838, 500, 500, 675, 716, 593, 716, 679,
    436, 716, 712, 343, 343, 666, 343, 1042, 712, 688,
    716, 716, 494, 596, 479, 712, 652, 924, 646, 652,
    583, 712, 366, 712, 838,
};

double viz_text_width(const char *text, double size, int bold)
{
    const unsigned short *w = bold ? dejavu_bold : dejavu_regular;
    long units = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p >= 32 && *p <= 126)
            units += w[*p - 32];
        else if ((*p & 0xc0) != 0x80) /* the first byte of a character */
            units += 1000;
    }
    return (double)units * size / 1000.0;
}
