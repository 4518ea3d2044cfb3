"""English-like sample text for generated benchmark pages: common English words, numbers,
percentages and hyphenated pairs, drawn from a seeded random generator."""

from __future__ import annotations

from typing import Any

VOCAB = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her one all their there been has more when will would who what so "
    "about out into than them can only other new some time could these two may first then do any "
    "like my now over such our man me even most made after also did many before must through back "
    "years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never "
    "day same another know while last might great old year off come since against go came right "
    "used take three himself few house use during without again place around however home small "
    "found thought went say part once general high upon school every does got united left number "
    "course war until always away something fact though water less public put think almost hand "
    "enough far took head yet government system better set told nothing night end why called "
    "didn find look asked later knew point next program city business give group toward young "
    "days let room president side social given present several order national possible rather "
    "second face per among form important often things early become others within political "
    "members development survey measured shoreline retreat stations coast average metres river "
    "funding drones receivers results published analysis quarterly budget committee revenue"
).split()


def sentence(rng: Any, n: int) -> str:
    """A sentence of ``n`` words: some numbers, percentages, capitals, hyphenated pairs, a comma."""
    ws = [rng.choice(VOCAB) for _ in range(n)]
    for i in range(len(ws)):
        r = rng.random()
        if r < 0.05:
            ws[i] = str(rng.randint(2, 9999))
        elif r < 0.08:
            ws[i] = f"{rng.randint(1, 99)}.{rng.randint(0, 9)}%"
        elif r < 0.12:
            ws[i] = ws[i].capitalize()
        elif r < 0.14:
            ws[i] = f"{ws[i]}-{rng.choice(VOCAB)}"
    if rng.random() < 0.3 and n > 6:
        k = rng.randint(2, n - 3)
        ws[k] += ","
    text = " ".join(ws)
    return text[:1].upper() + text[1:] + rng.choice([".", ".", ".", "?", ";"])


def paragraph(rng: Any, sentences: int) -> str:
    """``sentences`` sentences of 6 to 16 words."""
    return " ".join(sentence(rng, rng.randint(6, 16)) for _ in range(sentences))
