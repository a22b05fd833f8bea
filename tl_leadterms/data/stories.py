"""A seeded generator of simple English children's stories with planted associations.

The package's own default corpus: every word list and sentence template was written for
``tl_leadterms`` (no third-party text). Stories (characters, feelings, places, objects, actions,
dialogue) carry three kinds of association, strong in the corpus statistics and listed in
:data:`PLANTED`:

* **bigram**: a planted adjective is only ever followed by a few nouns (``"red"`` -> ball, car,
  dress, balloon, truck);
* **interchangeable**: he/she (and they), the names and the emotion words fill the same slots with
  the same frequencies (a character's gender is a fair coin; names, emotions uniform);
* **context**: each story has a setting whose place word (``"pond"``) comes in the first sentences
  and often after, and whose topic words (``"fish"``, ``"duck"`` ...) are scattered over the whole
  story and occur in no other setting.

A story is one line (no newline); :func:`write_corpus` separates stories by a blank line."""

from __future__ import annotations

import itertools
import os
import random
import re
from pathlib import Path
from typing import Any, no_type_check

from tl_leadterms.atomic import write_text
from tl_leadterms.data.story_text import (
    ACTS,
    ADJ,
    ANIMAL_ACTS,
    ANIMALS,
    BIGRAMS,
    BOYS,
    EMOTIONS,
    ENDINGS,
    EPISODES,
    FOODS,
    GIRLS,
    KID_ADJ,
    MASS_FOODS,
    NOUNS,
    OPENINGS,
    PADJ,
    PARENTS,
    SETTING_TEXT,
    TIMES,
    TVERBS,
    WEATHER,
    WOW,
    phrase_parts,
    words_of,
)
from tl_leadterms.data.tokenizers import PIECE
from tl_leadterms.errors import LeadTermsError

__all__ = ["PLANTED", "SETTINGS", "generate_stories", "read_corpus", "write_corpus"]

Character = tuple[str, str, str, str, str]  # name, subject, object, possessive, was/were
Setting = tuple[str, tuple[str, ...], str, tuple[str, ...], tuple[str, ...]]


def _parse_settings(text: str) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for place, ats, to, things_and_first, *scenes in phrase_parts(text):
        things, first = things_and_first.split(":")
        at = tuple(a.strip() for a in ats.split(";"))
        out[place] = (place, at, to, words_of(things), (first.strip(), *scenes))
    return out


SETTINGS: dict[str, Setting] = _parse_settings(SETTING_TEXT)
"""Settings by place word: (place, "at" phrases, "to" phrase, topic words, scene sentences)."""
_OUTDOOR = frozenset(words_of("pond farm forest beach park garden castle zoo jungle camp"))
_SCENE_LEADS = ("{x} saw that ", "{x} noticed that ", "{x} could see that ")
_DIALOGUE = re.compile(
    r'"(?P<q>[^"]+?)(?P<e>[!?,.])" (?P<v>said|asked) (?P<who>\{\w+\}( \{\w+\})?)\.'
)


def _dialogue_forms() -> dict[str, tuple[str, str]]:
    """'"X," said {bn}.' -> ('"X," {b} said.', '{bn} said, "X."') for every such template."""
    forms = {}
    for part in (*OPENINGS, *EPISODES, WEATHER, *ENDINGS):
        for template in part:
            if m := _DIALOGUE.fullmatch(template):
                end = "." if m["e"] == "," else m["e"]
                ref = {"{an}": "{a}", "{bn}": "{b}"}.get(m["who"], m["who"])
                tagged_after = f'"{m["q"]}{m["e"]}" {ref} {m["v"]}.'
                forms[template] = (tagged_after, f'{m["who"]} {m["v"]}, "{m["q"]}{end}"')
    return forms


_ALT = _dialogue_forms()


def _zipf(words: tuple[str, ...]) -> tuple[tuple[str, ...], list[float]]:
    """``words`` with cumulative Zipf weights ``1/(rank + 2)``, for a real frequency spread."""
    return words, list(itertools.accumulate(1.0 / (rank + 2) for rank in range(len(words))))


# Slots drawn afresh at each use: uniformly, or with Zipf weights.
_UNIFORM = (EMOTIONS[:4] * 4 + EMOTIONS[4:], TIMES, WOW, PADJ, MASS_FOODS, KID_ADJ, ANIMAL_ACTS)
_ZIPFED = (ACTS, ACTS, TVERBS, TVERBS, ADJ, NOUNS, ANIMALS, FOODS)
_DRAW: dict[str, tuple[tuple[str, ...], list[float] | None]] = {
    key: (words, None)
    for key, words in zip(words_of("emo time wow padj mass kidadj aact"), _UNIFORM, strict=True)
}
_DRAW.update(
    zip(words_of("act act2 tv tv2 adj noun animal food"), map(_zipf, _ZIPFED), strict=True)
)
_PLANTED_ADJ = tuple(BIGRAMS)
_PRONOUN_FIELD = {"p": 1, "po": 2, "ps": 3, "was": 4}

PLANTED: dict[str, Any] = {
    "bigram": {adj: list(nouns) for adj, nouns in BIGRAMS.items()},
    "interchangeable": [
        ["he", "she", "they"],
        [name.lower() for name in (*GIRLS[:4], *BOYS[:4])],
        ["happy", "sad", "excited", "scared"],
    ],
    "context": {
        "pond": ["fish", "water", "boat", "lake", "duck", "frog"],
        "farm": ["cow", "pig", "hen", "barn", "tractor"],
        "beach": ["sand", "crab", "shells", "sea", "waves"],
        "space": ["rocket", "planet", "alien", "comet", "astronaut"],
        "zoo": ["lion", "elephant", "monkeys", "zebra", "tiger"],
    },
}
"""The planted associations, as lower-case word tokens.

``bigram``: adjective -> the only nouns that ever follow it (drawn uniformly).
``interchangeable``: classes of words drawn into identical slots with equal probability
(pronouns by a fair-coin gender, names uniformly, the four emotions listed here each four
times as often as the eight other emotion words).
``context``: place word -> words that occur only in stories of that setting, which name the
place in their first sentences and often after.
"""


@no_type_check  # hot path: skip any test-time runtime type checker
def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" and not word.startswith("uni") else "a"


@no_type_check  # hot path: skip any test-time runtime type checker
class _Story:
    """One story's state (characters, setting, toy) and the filler of template slots.

    ``cur`` is the character named last; ``{p}``/``{po}``/``{ps}``/``{was}`` refer to it. A new
    reference is a pronoun when that is clear (mostly when it names ``cur`` again, or when
    the two characters differ in gender), else a name.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        hero_girl, friend_girl = rng.random() < 0.5, rng.random() < 0.5
        self.hero = self._char(rng.choice(GIRLS if hero_girl else BOYS), hero_girl)
        friend = self.hero[0]
        while friend == self.hero[0]:
            friend = rng.choice(GIRLS if friend_girl else BOYS)
        self.friend = self._char(friend, friend_girl)
        self.mixed = hero_girl != friend_girl  # "he" and "she" tell the two apart
        self.group: Character = (f"{self.hero[0]} and {friend}", "they", "them", "their", "were")
        self.cur, self.roles = self.hero, (self.hero, self.friend)
        self.place_key = rng.choice(tuple(SETTINGS))
        place, self.ats, to, self.things, self.scenes = SETTINGS[self.place_key]
        self._deck: list[str] = []
        self.episode: dict[str, str] = {}  # slots that keep their value for one episode
        if rng.random() < 0.7:
            adj, thing = "tall", "tree"
            while thing in ("cloud", "tree", "tower"):  # the toy is something one can hold
                adj = rng.choice(_PLANTED_ADJ)
                thing = rng.choice(BIGRAMS[adj])
        else:
            adj, thing = self.draw("adj"), self.draw("noun")
        kid = "girl" if hero_girl else "boy"
        self.fixed = {"toy": f"{adj} {thing}", "thing": thing, "place": place, "to": to, "kid": kid}

    @staticmethod
    def _char(name: str, girl: bool) -> Character:
        return (name, "she", "her", "her", "was") if girl else (name, "he", "him", "his", "was")

    def draw(self, key: str) -> str:
        words, cum = _DRAW[key]
        return self.rng.choices(words, cum_weights=cum)[0] if cum else self.rng.choice(words)

    def new_episode(self) -> None:
        """Forget episode-wide slots; give the roles a and b to the two characters."""
        self.episode = {}
        swap = self.rng.random() < 0.4
        self.roles = (self.friend, self.hero) if swap else (self.hero, self.friend)

    def scene(self) -> str:
        """The next scene sentence of the setting (each is used once before any repeats)."""
        if not self._deck:
            self._deck = list(self.scenes)
            self.rng.shuffle(self._deck)
        scene = self._deck.pop()
        if scene[0] != "{" and self.rng.random() < 0.6:
            scene = self.rng.choice(_SCENE_LEADS) + scene
        return self.render(scene)

    def _ref(self, char: Character) -> str:
        """Refer to ``char`` by pronoun or name and make it the current character."""
        same, self.cur = char is self.cur, char
        r = self.rng.random()
        if char is self.group:
            return "they" if same or r < 0.5 else char[0] if r < 0.85 else "the two friends"
        return char[1] if r < (0.9 if same else 0.7 if self.mixed else 0.2) else char[0]

    def _np(self, article: bool = True) -> str:
        """A noun phrase: a planted adjective and one of its nouns, or an ordinary pair."""
        if self.rng.random() < 0.45:
            adj = self.rng.choice(_PLANTED_ADJ)
            noun = self.rng.choice(BIGRAMS[adj])
        else:
            adj, noun = self.draw("adj"), self.draw("noun")
        return f"{_article(adj)} {adj} {noun}" if article else f"{adj} {noun}"

    def slot(self, key: str, filled: dict[str, str]) -> str:
        """The value of template slot ``key`` (``filled`` holds this sentence's slots)."""
        if key in _PRONOUN_FIELD:
            return self.cur[_PRONOUN_FIELD[key]]
        if key in self.fixed:
            return self.fixed[key]
        if key in ("t", "animal", "parent"):  # one value for the whole episode
            if key not in self.episode:
                pool = {"t": self.things, "parent": PARENTS}.get(key)
                self.episode[key] = self.rng.choice(pool) if pool else self.draw(key)
            return self.episode[key]
        if key in _DRAW:
            return self.draw(key)
        if key in ("a", "b"):
            return self._ref(self.roles[key == "b"])
        if key in ("x", "g"):  # x: role a, role b or both; g: both
            r = 1.0 if key == "g" else self.rng.random()
            return self._ref(self.roles[0] if r < 0.4 else self.roles[1] if r < 0.7 else self.group)
        if key in ("an", "bn"):
            return self.roles[key == "bn"][0]
        if key in ("h", "f"):
            self.cur = self.hero if key == "h" else self.friend
            return self.cur[0]
        if key == "at":
            return self.rng.choice(self.ats)
        if key in ("np", "np2", "bnp"):
            return self._np(article=key != "bnp")
        if key in ("ta", "ani", "meal"):
            word = self.draw("food") if key == "meal" else filled["t" if key == "ta" else "animal"]
            return f"{_article(word)} {word}"
        raise KeyError(f"unknown story template slot {key!r}")

    def render(self, template: str) -> str:
        """Fill ``template`` and capitalise its first letter (inside a leading quote too)."""
        if template in _ALT:
            r = self.rng.random()
            template = _ALT[template][0] if r < 0.5 else _ALT[template][1] if r < 0.7 else template
        text = template.format_map(_Slots(self))
        i = 1 if text[0] == '"' else 0
        return text[:i] + text[i].upper() + text[i + 1 :]


@no_type_check  # hot path: skip any test-time runtime type checker
class _Slots(dict):
    """Per-sentence slot values, made on first use and reused within the sentence."""

    def __init__(self, story: _Story) -> None:
        super().__init__()
        self.story = story

    def __missing__(self, key: str) -> str:
        value = self.story.slot(key, self)
        self[key] = value
        return value


@no_type_check  # hot path: skip any test-time runtime type checker
def _n_words(sentences: list[str]) -> int:
    return sum(s.count(" ") + 1 for s in sentences)


@no_type_check  # hot path: skip any test-time runtime type checker
def _one_story(rng: random.Random, min_words: int, max_words: int) -> str:
    st = _Story(rng)
    target = rng.randint(min_words, max_words)
    out = [st.render(t) for t in rng.choice(OPENINGS)]
    out.append(st.scene())
    episodes = list(EPISODES) + ([WEATHER] if st.place_key in _OUTDOOR else [])
    rng.shuffle(episodes)
    ending = rng.choice(ENDINGS)
    i = 0
    while True:
        if i > 0 and _n_words(out) + 25 >= target:  # an ending has about 25 words
            tail = [st.render(t) for t in ending]
            if _n_words(out) + _n_words(tail) >= min_words:
                return " ".join(out + tail)
        st.new_episode()
        lines = [st.render(t) for t in episodes[i % len(episodes)]]
        for _ in range(1 + (rng.random() < 0.5)):  # one or two scene sentences per episode
            lines.insert(rng.randint(0, len(lines)), st.scene())
        out.extend(lines)
        i += 1


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LeadTermsError(f"{name} must be an int >= {minimum}, got {value!r}.")
    return value


def generate_stories(
    n_stories: int, *, seed: int = 0, min_words: int = 150, max_words: int = 400
) -> list[str]:
    """Generate ``n_stories`` children's stories, deterministically from ``seed``.

    Story ``i`` depends only on ``(seed, i)``, so a longer corpus extends a shorter one with the
    same seed. Global random state is never touched.

    Args:
        n_stories: number of stories (``>= 0``).
        seed: any int; the same seed always gives the same text.
        min_words: each story has at least this many whitespace-separated words (so at least
            this many word-level tokens); every story has some 60 words at the least.
        max_words: lengths are drawn uniformly from ``[min_words, max_words]``; a story can
            run a few dozen words past its draw.

    Returns:
        The stories, one string each (no newlines inside a story).

    Raises:
        LeadTermsError: for a negative or non-int count, a non-int seed, or bad lengths.
    """
    _check_int("n_stories", n_stories, 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise LeadTermsError(f"seed must be an int, got {seed!r}.")
    _check_int("min_words", min_words, 1)
    _check_int("max_words", max_words, 1)
    if max_words < min_words:
        raise LeadTermsError(
            f"max_words={max_words} is below min_words={min_words}; pass max_words >= min_words."
        )
    return [
        _one_story(random.Random(f"tl_leadterms.stories:{seed}:{i}"), min_words, max_words)
        for i in range(n_stories)
    ]


def write_corpus(
    path: str | os.PathLike[str],
    n_stories: int,
    *,
    seed: int = 0,
    min_words: int = 150,
    max_words: int = 400,
) -> Path:
    """Write ``generate_stories(n_stories, seed=seed, ...)`` to ``path`` as UTF-8, atomically.

    Stories are separated by a blank line (``"\\n\\n"``); the file ends with a newline. Readers
    never see a half-written corpus (:mod:`tl_leadterms.atomic`).

    Returns:
        The path written.

    Raises:
        LeadTermsError: if the directory of ``path`` does not exist (see
            :mod:`tl_leadterms.atomic`), or as :func:`generate_stories`.
    """
    stories = generate_stories(n_stories, seed=seed, min_words=min_words, max_words=max_words)
    return write_text(path, "\n\n".join(stories) + "\n")


def read_corpus(path: str | os.PathLike[str]) -> list[str]:
    """Read a corpus written by :func:`write_corpus`: the non-empty blank-line-separated stories.

    The file is read a line at a time, a long line in pieces of :data:`~.tokenizers.PIECE`
    characters (a piece never ends inside a character), so that a file with no line break
    costs no more than one with them: its text, once.
    """
    docs, parts, whole_line = [], [], True
    with open(path, encoding="utf-8") as f:
        for piece in itertools.chain(iter(lambda: f.readline(PIECE), ""), [None]):
            if piece is None or (piece == "\n" and whole_line):  # a blank line or the end
                docs.append("".join(parts).strip())
                parts = []
            else:
                parts.append(piece)
                whole_line = piece.endswith("\n")
    return [d for d in docs if d]
