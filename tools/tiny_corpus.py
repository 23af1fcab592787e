"""A seeded synthetic chat corpus for llmnb's tiny trained models.

Two kinds of task. The deterministic families mirror diffuse-cpp's eight benchmark prompts
(reference/diffuse-cpp.md §7): factual QA (capitals from a fixed table), arithmetic (two-digit
addition, small products), translation EN->FR and EN->ES from a fixed phrase table, listing
(planets, days, months ...), tiny Python functions, two-sentence explanations and four-line
poems; each answer is a fixed function of the task, never of the phrasing. The multi-answer
families have several valid answers per prompt, drawn with equal frequency, whose tokens depend
on each other: a poem about an animal (one of 6), a story about an animal (one of 7), and two or
three distinct items of a list in any order (42 to 336 answers). Committing positions
independently mixes them ("Mars and Mars", half of one poem glued to another); that is what a
masked diffusion model must denoise in steps for.

The rule families, in the style of ParallelBench (2025: tasks where committing every
position at once has an error floor), work on a list the prompt gives, of 3 to 6 words of
``RULE_ITEMS`` (each one token for the tiny tokenizer, first in a line or after a space): copy
it, write it in reverse, replace one item everywhere, put it in alphabetical order (one valid
answer each), or name k different items of it (any k are valid, in any order: 12 to 120
answers). Their validity is a rule on the prompt's list (``llmnb.perf.heldout.is_valid``), not a
list of answers; a held-out instance (rule and list) never occurs in training.

The training corpus is regenerated from the seed on every run (``training_examples``), never
stored; ``training_examples(n, rules=False)`` is the corpus without the rule families that
today's models were trained on. The held-out set (unseen phrasings, unseen addition operand
pairs, products with the operands in the unseen order, unseen rule instances), with every valid
answer of each answer-family prompt and the rule of each rule-family one, is written to
``data/eval/tiny_heldout.jsonl``:

    python tools/tiny_corpus.py                 # write data/eval/tiny_heldout.jsonl, print stats
    python tools/tiny_corpus.py --sample 5      # also print a few training examples
    python tools/tiny_corpus.py --check         # also check lengths and structure (tokenizer)
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from functools import cache
from math import perm
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HELDOUT_PATH = REPO / "data" / "eval" / "tiny_heldout.jsonl"
SEED = 1234
SYSTEM = "You are a helpful assistant."   # the benchmark's system prompt (diffuse-cpp.md §7)
SYSTEM_FRACTION = 0.3                     # share of training examples that carry it


@dataclass(frozen=True)
class Example:
    """One chat exchange: a user prompt, the assistant's answer, and where it came from."""

    family: str
    prompt: str
    answer: str
    system: str | None = None
    instance: RuleInstance | None = None    # a rule family's rule and list


# ================================================================================================
# Fixed tables
# ================================================================================================

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Russia", "Moscow"),
    ("Greece", "Athens"), ("Turkey", "Ankara"), ("Poland", "Warsaw"), ("Sweden", "Stockholm"),
    ("Norway", "Oslo"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Ireland", "Dublin"),
    ("Austria", "Vienna"), ("Hungary", "Budapest"), ("Peru", "Lima"), ("Chile", "Santiago"),
    ("Australia", "Canberra"), ("South Korea", "Seoul"), ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"), ("Nigeria", "Abuja"), ("Morocco", "Rabat"),
    ("Cuba", "Havana"), ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"),
    ("Switzerland", "Bern"), ("Colombia", "Bogota"), ("the United Kingdom", "London"),
]

# English -> (French, Spanish)
PHRASES = [
    ("The weather is beautiful today", "Il fait beau aujourd'hui", "Hace buen tiempo hoy"),
    ("I love programming", "J'aime programmer", "Me encanta programar"),
    ("Good morning", "Bonjour", "Buenos días"),
    ("Good night", "Bonne nuit", "Buenas noches"),
    ("Thank you very much", "Merci beaucoup", "Muchas gracias"),
    ("Where is the library?", "Où est la bibliothèque ?", "¿Dónde está la biblioteca?"),
    ("I am hungry", "J'ai faim", "Tengo hambre"),
    ("The cat is black", "Le chat est noir", "El gato es negro"),
    ("I like to read books", "J'aime lire des livres", "Me gusta leer libros"),
    ("See you tomorrow", "À demain", "Hasta mañana"),
    ("My name is Anna", "Je m'appelle Anna", "Me llamo Anna"),
    ("The house is big", "La maison est grande", "La casa es grande"),
    ("I drink water", "Je bois de l'eau", "Bebo agua"),
    ("The sun is shining", "Le soleil brille", "El sol brilla"),
    ("We are friends", "Nous sommes amis", "Somos amigos"),
    ("How are you?", "Comment allez-vous ?", "¿Cómo estás?"),
    ("The book is on the table", "Le livre est sur la table", "El libro está sobre la mesa"),
    ("The dog is sleeping", "Le chien dort", "El perro duerme"),
    ("I have two brothers", "J'ai deux frères", "Tengo dos hermanos"),
    ("It is cold today", "Il fait froid aujourd'hui", "Hace frío hoy"),
    ("I want a coffee", "Je veux un café", "Quiero un café"),
    ("The car is red", "La voiture est rouge", "El coche es rojo"),
    ("Happy birthday", "Joyeux anniversaire", "Feliz cumpleaños"),
    ("Good luck", "Bonne chance", "Buena suerte"),
    ("I live in the city", "J'habite en ville", "Vivo en la ciudad"),
    ("The children are playing", "Les enfants jouent", "Los niños juegan"),
    ("Open the door", "Ouvrez la porte", "Abre la puerta"),
    ("The sea is blue", "La mer est bleue", "El mar es azul"),
]

# (two ways to name the list, the answer)
LISTS = [
    (("the planets in our solar system", "the planets of the solar system"),
     "Mercury, Venus, Earth, Mars, Jupiter, Saturn, Uranus, Neptune"),
    (("the days of the week", "the seven days of the week"),
     "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday"),
    (("the months of the year", "the twelve months of the year"),
     "January, February, March, April, May, June, July, August, September, October, "
     "November, December"),
    (("the four seasons", "the seasons of the year"), "Spring, Summer, Autumn, Winter"),
    (("the continents", "the seven continents"),
     "Africa, Antarctica, Asia, Australia, Europe, North America, South America"),
    (("the oceans of the world", "the five oceans"), "Pacific, Atlantic, Indian, Southern, Arctic"),
    (("the colors of the rainbow", "the seven colors of the rainbow"),
     "Red, Orange, Yellow, Green, Blue, Indigo, Violet"),
    (("the primary colors", "the three primary colors"), "Red, Yellow, Blue"),
    (("the vowels in English", "the English vowels"), "A, E, I, O, U"),
]

# (what the function does, its code)
PYTHON = [
    ("check if a number is prime",
     "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, n):\n"
     "        if n % i == 0:\n            return False\n    return True"),
    ("check if a number is even", "def is_even(n):\n    return n % 2 == 0"),
    ("check if a number is odd", "def is_odd(n):\n    return n % 2 == 1"),
    ("compute the factorial of a number",
     "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n"
     "    return result"),
    ("return the nth Fibonacci number",
     "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
     "    return a"),
    ("return the square of a number", "def square(x):\n    return x * x"),
    ("add two numbers", "def add(a, b):\n    return a + b"),
    ("reverse a string", "def reverse(s):\n    return s[::-1]"),
    ("find the largest number in a list",
     "def largest(numbers):\n    best = numbers[0]\n    for x in numbers:\n        if x > best:\n"
     "            best = x\n    return best"),
    ("sum a list of numbers",
     "def total(numbers):\n    result = 0\n    for x in numbers:\n        result += x\n"
     "    return result"),
    ("check if a string is a palindrome",
     "def is_palindrome(s):\n    return s == s[::-1]"),
]

EXPLANATIONS = [
    ("why the sky is blue",
     "Sunlight is scattered by the air, and blue light is scattered the most. "
     "So we see blue light coming from every part of the sky."),
    ("why it rains",
     "Water vapor in clouds cools and forms drops. When the drops get heavy, they fall as rain."),
    ("why we have seasons",
     "The Earth is tilted on its axis. As it orbits the Sun, each half gets more or less "
     "direct sunlight."),
    ("why leaves are green",
     "Leaves contain chlorophyll. It absorbs red and blue light and reflects green light."),
    ("why the sea is salty",
     "Rivers carry salt from rocks into the sea. When sea water evaporates, the salt stays "
     "behind."),
    ("what causes tides",
     "The Moon's gravity pulls on the oceans. This pull makes the water rise and fall each day."),
    ("why ice floats",
     "Ice is less dense than liquid water. So it floats on top of the water."),
    ("how a rainbow forms",
     "Sunlight enters raindrops and bends. The light splits into its colors and forms a "
     "rainbow."),
]

POEMS = [
    ("ocean", "Blue waves roll in the light,\nthe ocean hums all night.\n"
              "Salt and foam upon the shore,\nthe sea will sing forevermore."),
    ("moon", "The silver moon climbs high,\na lantern in the sky.\n"
             "It watches while we sleep,\nand guards the shadows deep."),
    ("forest", "Tall trees whisper low,\nwhere green mosses grow.\n"
               "Birds sing in the shade,\nin the quiet forest glade."),
    ("rain", "Soft rain taps the glass,\nand drips upon the grass.\n"
             "The clouds let go their tears,\nand wash away our fears."),
    ("sun", "The golden sun will rise,\nand paint the morning skies.\n"
            "It warms the fields and sea,\nand shines for you and me."),
    ("snow", "White snow falls so slow,\non the fields below.\n"
             "The world is calm and bright,\nwrapped in a blanket of white."),
    ("stars", "Bright stars in the dark,\neach one a tiny spark.\n"
              "They sparkle far away,\nand fade at break of day."),
    ("wind", "The wind runs through the trees,\nit dances with the leaves.\n"
             "You cannot see it pass,\nbut hear it in the grass."),
    ("mountains", "The mountains stand so tall,\nthe oldest friends of all.\n"
                  "Their peaks are capped with snow,\nabove the clouds below."),
    ("river", "The river winds along,\nand hums a gentle song.\n"
              "It runs from hill to sea,\nforever wild and free."),
]

# ------------------------------------------------------------------------------------------------
# Multi-answer tables. Within one prompt every answer has the same number of tokens (the poems'
# lines and the stories' sentences too), and no two answers hold the same token at the same
# position unless all of them do, so one committed token of an answer identifies it
# (``tiny_corpus.py --check`` verifies both with the tokenizer).
# ------------------------------------------------------------------------------------------------

# Plural animals for the poems; each poem names its topic once.
POEM_TOPICS = ["cats", "dogs", "birds", "bees", "horses", "foxes", "owls", "whales", "bears",
               "wolves", "ducks", "frogs", "rabbits", "lions"]
POEM_TEMPLATES = [
    "Little {t} in the early morning sun\n"
    "are out across the grass for fun\n"
    "They rest beneath an old oak tree\n"
    "as happy as they can be.",
    "I saw some {t} beside my door\n"
    "many more than I had seen before\n"
    "We looked around and I said hello\n"
    "and off they went so slow.",
    "Across the hills and by the lake\n"
    "a few {t} play all day long\n"
    "Then they listen to the falling rain\n"
    "then hurry back across the plain.",
    "Far on the mountain cold and white\n"
    "the {t} climb from side to side\n"
    "Snow and wind will never stop them\n"
    "they always find their way home.",
    "When evening comes my {t} walk away\n"
    "and sleep in a quiet hidden place\n"
    "and dream of secrets they will keep\n"
    "until the morning sun comes back.",
    "You run and play dear little {t}\n"
    "from early dawn to close of day\n"
    "You never rest but you never tire\n"
    "you sleep by the warm fire.",
]

# Singular animals for the stories (each starts with a consonant: "a {a}").
STORY_ANIMALS = ["fox", "bear", "mouse", "duck", "frog", "wolf", "lion", "goat", "deer", "crow",
                 "hare", "seal", "pig", "hen"]
STORY_TEMPLATES = [
    "Once upon a time a {a} lived near the river. "
    "Every morning it looked for food and at night it slept. "
    "It was happy there for many years and never left.",
    "There once was a {a} who loved to sing songs. "
    "Its songs were so sweet that every animal came to listen. "
    "Soon it had more friends than anyone in the valley.",
    "In a small village there lived a wise old {a}. "
    "When the cold winter came it shared its food with everyone. "
    "Nobody in the village ever forgot the kindness it showed.",
    "The lonely little {a} found a lost bird one night. "
    "It carried the bird to its warm cave until spring came. "
    "From then on the two of them were best friends.",
    "A brave {a} once saved the whole town from floods. "
    "Everyone was warned in time and the people built a statue. "
    "Today that statue still stands proudly in the town square.",
    "Deep in the woods the curious {a} found a key. "
    "The key opened a door into a room full of books. "
    "Every day after that it came back to read there.",
    "Our {a} sat down under an old apple tree today. "
    "An apple fell on its head so it laughed very hard. "
    "Still laughing it happily danced along a road back home.",
]

# (how a prompt names the list, its items, how many to name: 2 and/or 3). Items are distinct,
# in any order: "Mars and Venus", "Mars, Venus and Earth".
PICK_LISTS = [
    ("planets", ["Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"],
     (2, 3)),
    ("days of the week", ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                          "Sunday"], (2, 3)),
    ("colors", ["Red", "Blue", "Green", "Yellow", "Black", "White", "Brown", "Purple"], (2, 3)),
    ("fruits", ["Apple", "Banana", "Cherry", "Grape", "Lemon", "Mango", "Orange", "Pear"],
     (2, 3)),
]
COUNT_WORDS = {2: "two", 3: "three"}


def pick_answers(items: list[str], k: int) -> list[str]:
    """Every ordered choice of `k` distinct items, as "A and B" / "A, B and C"."""
    from itertools import permutations
    return [", ".join(p[:-1]) + " and " + p[-1] for p in permutations(items, k)]


# ================================================================================================
# Rule families: the prompt gives a list; the answer is the list copied, reversed, with one item
# replaced everywhere, sorted, or k different items of it, joined by ", ". Validity is the rule
# (llmnb.perf.heldout.is_valid), so a held-out instance needs no list of answers.
# ================================================================================================

# The words of PICK_LISTS: each is one token of the tiny tokenizer both at the start of the
# answer and after ", " (tests/test_heldout.py checks it), so a list of n items is 2n - 1 tokens.
RULE_ITEMS = sorted({item for _, items, _ in PICK_LISTS for item in items})
RULE_FAMILIES = ("copy", "reverse", "replace", "alphabetical", "distinct")
SEPARATOR = ", "
# Held-out prompts per rule family (distinct: the multi-answer kind).
RULE_HELDOUT = {"copy": 40, "reverse": 40, "replace": 40, "alphabetical": 40, "distinct": 60}
RULE_WEIGHTS = {"copy": 0.05, "reverse": 0.05, "replace": 0.05, "alphabetical": 0.05,
                "distinct": 0.07}

# The same phrasings in training and held-out: what is new in a held-out prompt is its list.
RULE_TEMPLATES: dict[str, list[str]] = {
    "copy": ["Copy this list: {items}.", "Copy the list: {items}.", "Repeat this list: {items}.",
             "Write this list again: {items}.", "Please copy this list: {items}.",
             "Can you copy this list: {items}?"],
    "reverse": ["Write this list in reverse: {items}.", "Reverse this list: {items}.",
                "Write this list backwards: {items}.", "Reverse the list: {items}.",
                "Please reverse this list: {items}.", "Can you reverse this list: {items}?"],
    "replace": ["Replace {old} with {new} in this list: {items}.",
                "In this list, replace {old} with {new}: {items}.",
                "Write this list with {new} in place of {old}: {items}.",
                "Change every {old} to {new} in this list: {items}.",
                "Please replace {old} with {new} in this list: {items}."],
    "alphabetical": ["Put these names in alphabetical order: {items}.",
                     "Sort these names alphabetically: {items}.",
                     "Write these names in alphabetical order: {items}.",
                     "Please put these names in alphabetical order: {items}.",
                     "Can you sort these names alphabetically: {items}?"],
    "distinct": ["Name {k} different items from this list: {items}.",
                 "Pick {k} different names from this list: {items}.",
                 "Choose {k} different items from this list: {items}.",
                 "Give me {k} different names from this list: {items}.",
                 "Please name {k} different items from this list: {items}."],
}


@dataclass(frozen=True)
class RuleInstance:
    """One rule on one list: what a rule-family prompt asks (its phrasing aside)."""

    rule: str
    items: tuple[str, ...]
    old: str = ""
    new: str = ""
    k: int = 0

    def fields(self) -> dict[str, str]:
        """The template fields."""
        return {"items": SEPARATOR.join(self.items), "old": self.old, "new": self.new,
                "k": COUNT_WORDS.get(self.k, "")}

    def row(self) -> dict[str, Any]:
        """The rule and its arguments, as a held-out line carries them."""
        args: dict[str, Any] = {"rule": self.rule, "items": list(self.items)}
        if self.rule == "replace":
            args |= {"old": self.old, "new": self.new}
        if self.rule == "distinct":
            args["k"] = self.k
        return args

    @property
    def modes(self) -> int:
        return perm(len(self.items), self.k) if self.rule == "distinct" else 1

    def answer(self, rng: random.Random) -> str:
        """A valid answer (for distinct, an ordered choice of k items drawn uniformly)."""
        if self.rule == "copy":
            out = list(self.items)
        elif self.rule == "reverse":
            out = self.items[::-1]
        elif self.rule == "replace":
            out = [self.new if x == self.old else x for x in self.items]
        elif self.rule == "alphabetical":
            out = sorted(self.items)
        else:
            out = rng.sample(self.items, self.k)
        return SEPARATOR.join(out)


def draw_instance(rule: str, rng: random.Random) -> RuleInstance:
    """A random instance: 3-5 different items (copy, reverse, alphabetical; never already in
    order for alphabetical), 4-5 items of which one, `old`, twice (replace; `new` is not in the
    list), or 4-6 different items and k = 2 or 3 (distinct)."""
    if rule in ("copy", "reverse", "alphabetical"):
        while True:
            items = tuple(rng.sample(RULE_ITEMS, rng.randint(3, 5)))
            if rule != "alphabetical" or list(items) != sorted(items):
                return RuleInstance(rule, items)
    if rule == "replace":
        n = rng.randint(4, 5)
        old, new, *rest = rng.sample(RULE_ITEMS, n)
        listed = rest + [old, old]
        rng.shuffle(listed)
        return RuleInstance(rule, tuple(listed), old, new)
    if rule == "distinct":
        return RuleInstance(rule, tuple(rng.sample(RULE_ITEMS, rng.randint(4, 6))),
                            k=rng.choice((2, 3)))
    raise ValueError(f"unknown rule family {rule!r}")


@cache
def heldout_instances(seed: int = SEED) -> tuple[tuple[RuleInstance, str], ...]:
    """The held-out rule instances, each with its phrasing: ``RULE_HELDOUT[rule]`` different
    instances of each rule, drawn from the seed."""
    rng = random.Random(seed + 3)
    out: list[tuple[RuleInstance, str]] = []
    for rule in RULE_FAMILIES:
        seen: set[RuleInstance] = set()
        while len(seen) < RULE_HELDOUT[rule]:
            inst = draw_instance(rule, rng)
            if inst not in seen:
                seen.add(inst)
                out.append((inst, rng.choice(RULE_TEMPLATES[rule])))
    return tuple(out)


# ================================================================================================
# Phrasings: (training templates, held-out templates). The first training template of each
# family is the benchmark prompt's own wording (diffuse-cpp.md §7). A held-out template is a
# new combination of words the family's training templates use (no word is new to the model).
# ================================================================================================

TEMPLATES: dict[str, tuple[list[str], list[str]]] = {
    "capitals": (
        ["What is the capital of {c}?", "Name the capital of {c}.",
         "Which city is the capital of {c}?", "Tell me the capital of {c}.",
         "What's the capital city of {c}?", "Please name the capital of {c}."],
        ["Please tell me the capital of {c}.", "Which city is the capital city of {c}?"]),
    "addition": (
        ["What is {a} plus {b}?", "What is {a} + {b}?", "Add {a} and {b}.", "Compute {a} + {b}.",
         "What is the sum of {a} and {b}?", "Please compute {a} plus {b}."],
        ["Please add {a} and {b}.", "Compute the sum of {a} and {b}."]),
    "multiplication": (
        ["What is {a} multiplied by {b}?", "What is {a} times {b}?", "Multiply {a} by {b}.",
         "What is {a} x {b}?", "Compute {a} times {b}.",
         "Please compute the product of {a} and {b}."],
        ["Please multiply {a} by {b}.", "What is the product of {a} and {b}?"]),
    "translate_fr": (
        ["Translate to French: {p}", "Translate this to French: {p}",
         "Translate into French: {p}", "How do you say \"{p}\" in French?",
         "Please translate into French: {p}", "What is the French for \"{p}\"?"],
        ["Please translate to French: {p}", "What is \"{p}\" in French?"]),
    "translate_es": (
        ["Translate to Spanish: {p}", "Translate this to Spanish: {p}",
         "Translate into Spanish: {p}", "How do you say \"{p}\" in Spanish?",
         "Please translate into Spanish: {p}", "What is the Spanish for \"{p}\"?"],
        ["Please translate to Spanish: {p}", "What is \"{p}\" in Spanish?"]),
    "listing": (
        ["List {x}", "List {x}.", "Name {x}.", "What are {x}?", "Give me {x}.",
         "Can you tell me {x}?", "Please give me {x}."],
        ["Please name {x}.", "Can you list {x}?"]),
    "python": (
        ["Write a Python function to {d}", "Write a Python function to {d}.",
         "Write a Python function that can {d}.", "Give me a Python function to {d}.",
         "Show me Python code to {d}.", "Please create a Python function to {d}.",
         "Can you show me Python code to {d}?"],
        ["Please write a Python function to {d}.",
         "Can you write a Python function that can {d}?"]),
    "explain": (
        ["Explain {t} in two sentences", "Explain {t}.", "Briefly explain {t}.",
         "Tell me {t}.", "Explain {t} in two sentences.", "Can you tell me {t}?",
         "Please explain {t}."],
        ["Please explain {t} in two sentences.", "Can you briefly explain {t}?"]),
    "poem": (
        ["Write a short poem about the {t}", "Write a poem about the {t}.",
         "Compose a short poem about the {t}.", "Give me a short poem about the {t}.",
         "Write a short poem about the {t}.", "Please write a poem about the {t}.",
         "Can you give me a poem about the {t}?"],
        ["Please compose a short poem about the {t}.",
         "Can you write a short poem about the {t}?"]),
    # multi-answer families: three held-out phrasings each
    "animal_poem": (
        ["Write a poem about {t}.", "Write a poem about {t}", "Give me a poem about {t}.",
         "Compose a poem about {t}.", "Can you write a poem about {t}?",
         "Please write a poem about {t}."],
        ["Please compose a poem about {t}.", "Can you give me a poem about {t}?",
         "Compose a poem about {t}, please."]),
    "story": (
        ["Tell me a story about a {a}.", "Tell me a short story about a {a}.",
         "Write a story about a {a}.", "Write a short story about a {a}.",
         "Can you tell me a story about a {a}?", "Please tell me a story about a {a}."],
        ["Please write a story about a {a}.", "Can you write a short story about a {a}?",
         "Please tell me a short story about a {a}."]),
    "pick": (
        ["Name {k} {x}.", "Name any {k} {x}.", "Give me {k} {x}.", "List {k} {x}.",
         "Tell me {k} {x}.", "Can you name {k} {x}?"],
        ["Please name {k} {x}.", "Can you give me {k} {x}?", "Please list any {k} {x}."]),
}

FAMILIES = list(TEMPLATES)
MULTI_FAMILIES = ("animal_poem", "story", "pick")

# How often each family is drawn for training (arithmetic has the most distinct items).
WEIGHTS = {"capitals": 0.07, "addition": 0.2, "multiplication": 0.09, "translate_fr": 0.05,
           "translate_es": 0.05, "listing": 0.05, "python": 0.05, "explain": 0.05, "poem": 0.05,
           "animal_poem": 0.1, "story": 0.12, "pick": 0.12}

# The eight benchmark prompts (diffuse-cpp.md §7) are always in the training corpus.
BENCHMARK_PROMPTS = [
    "What is the capital of France?",
    "Translate to French: The weather is beautiful today",
    "Write a Python function to check if a number is prime",
    "Write a short poem about the ocean",
    "Explain why the sky is blue in two sentences",
    "List the planets in our solar system",
    "What is 15 multiplied by 23?",
    "Translate to Spanish: I love programming",
]


# ================================================================================================
# Operand splits (decided once from the seed, so training and held-out never overlap)
# ================================================================================================

def arithmetic_split(seed: int = SEED) -> tuple[list[tuple[int, int]], list[tuple[int, int]],
                                                list[tuple[int, int]], list[tuple[int, int]]]:
    """(train addition pairs, held-out addition pairs, train product pairs, held-out products).

    Addition: ordered pairs of two-digit numbers; 60 never appear in training.
    Products: factors 2..12 (the multiplication table) plus the benchmark's 15 x 23; for 20
    unequal pairs only one order is trained and the held-out asks the other order.
    """
    rng = random.Random(seed)
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    rng.shuffle(pairs)
    add_held, add_train = pairs[:60], pairs[60:]
    unordered = [(a, b) for a in range(2, 13) for b in range(a + 1, 13)]
    rng.shuffle(unordered)
    one_way = unordered[:20]
    mul_held = [(b, a) for a, b in one_way]
    held = set(mul_held)
    mul_train = [(a, b) for a in range(2, 13) for b in range(2, 13) if (a, b) not in held]
    mul_train.append((15, 23))
    return add_train, add_held, mul_train, mul_held


# ================================================================================================
# Building examples
# ================================================================================================

def _items(family: str, add_pairs: list[tuple[int, int]],
           mul_pairs: list[tuple[int, int]]) -> list[tuple[dict[str, str], list[str]]]:
    """Every (template fields, valid answers) of a family; one answer for the deterministic
    families."""
    if family == "capitals":
        return [({"c": c}, [f"The capital of {c} is {cap}."]) for c, cap in CAPITALS]
    if family == "addition":
        return [({"a": str(a), "b": str(b)}, [f"{a} + {b} = {a + b}"]) for a, b in add_pairs]
    if family == "multiplication":
        return [({"a": str(a), "b": str(b)}, [f"{a} x {b} = {a * b}"]) for a, b in mul_pairs]
    if family == "translate_fr":
        return [({"p": en}, [fr]) for en, fr, _ in PHRASES]
    if family == "translate_es":
        return [({"p": en}, [es]) for en, _, es in PHRASES]
    if family == "listing":
        return [({"x": name}, [answer]) for names, answer in LISTS for name in names]
    if family == "python":
        return [({"d": d}, [code]) for d, code in PYTHON]
    if family == "explain":
        return [({"t": t}, [text]) for t, text in EXPLANATIONS]
    if family == "poem":
        return [({"t": t}, [text]) for t, text in POEMS]
    if family == "animal_poem":
        return [({"t": t}, [p.format(t=t) for p in POEM_TEMPLATES]) for t in POEM_TOPICS]
    if family == "story":
        return [({"a": a}, [p.format(a=a) for p in STORY_TEMPLATES]) for a in STORY_ANIMALS]
    if family == "pick":
        return [({"k": COUNT_WORDS[k], "x": name}, pick_answers(items, k))
                for name, items, ks in PICK_LISTS for k in ks]
    raise ValueError(f"unknown family {family!r}")


def training_examples(n: int, seed: int = SEED, rules: bool = True) -> list[Example]:
    """`n` training examples drawn from the seed: families by ``WEIGHTS`` (and
    ``RULE_WEIGHTS`` when `rules`), a random training phrasing and item each, one of the item's
    valid answers uniformly (so every answer of a multi-answer prompt is equally frequent), 30%
    with the benchmark's system prompt; the eight benchmark prompts come first (each twice,
    with and without the system prompt). A rule family's instance is drawn afresh, never one of
    ``heldout_instances``. With `rules` False this is the corpus of the models trained before
    the rule families existed, draw for draw."""
    add_train, _, mul_train, _ = arithmetic_split(seed)
    items = {f: _items(f, add_train, mul_train) for f in FAMILIES}
    held = {inst for inst, _ in heldout_instances(seed)}
    rng = random.Random(seed + 1)
    out: list[Example] = []
    for prompt in BENCHMARK_PROMPTS:
        answer = benchmark_answer(prompt)
        out.append(Example("benchmark", prompt, answer))
        out.append(Example("benchmark", prompt, answer, SYSTEM))
    weighted = WEIGHTS | RULE_WEIGHTS if rules else WEIGHTS
    families = list(weighted)
    weights = [weighted[f] for f in families]
    while len(out) < n:
        family = rng.choices(families, weights)[0]
        if family in RULE_FAMILIES:
            inst = draw_instance(family, rng)
            while inst in held:
                inst = draw_instance(family, rng)
            template = rng.choice(RULE_TEMPLATES[family])
            system = SYSTEM if rng.random() < SYSTEM_FRACTION else None
            out.append(Example(family, template.format(**inst.fields()), inst.answer(rng),
                               system, inst))
            continue
        fields, answers = rng.choice(items[family])
        answer = rng.choice(answers)
        template = rng.choice(TEMPLATES[family][0])
        system = SYSTEM if rng.random() < SYSTEM_FRACTION else None
        out.append(Example(family, template.format(**fields), answer, system))
    return out[:n]


def benchmark_answer(prompt: str) -> str:
    """The fixed answer to one of the eight benchmark prompts (they use training phrasings)."""
    add_train, _, mul_train, _ = arithmetic_split()
    for family in FAMILIES:
        for fields, answers in _items(family, add_train, mul_train):
            if TEMPLATES[family][0][0].format(**fields) == prompt:
                return answers[0]
    raise ValueError(f"not a benchmark prompt: {prompt!r}")


@dataclass(frozen=True)
class HeldOut:
    """One held-out prompt and every valid answer to it (the first is ``answer``), or the rule
    instance that decides it (a rule family)."""

    family: str
    prompt: str
    answers: tuple[str, ...]
    instance: RuleInstance | None = None

    @property
    def answer(self) -> str:
        """The first valid answer (a rule family's: its one answer, or distinct's first k
        items)."""
        if self.instance is None:
            return self.answers[0]
        if self.instance.rule == "distinct":
            return SEPARATOR.join(self.instance.items[:self.instance.k])
        return self.instance.answer(random.Random(0))   # the one answer: no draw

    @property
    def modes(self) -> int:
        return self.instance.modes if self.instance is not None else len(self.answers)

    def row(self) -> dict[str, Any]:
        """The held-out line: prompt, family, modes and answers (+ answer) or the rule."""
        head = {"family": self.family, "prompt": self.prompt}
        if self.instance is not None:
            return head | {"modes": self.modes} | self.instance.row()
        return head | {"answers": list(self.answers), "modes": self.modes, "answer": self.answer}

    def valid(self, text: str) -> bool:
        """``llmnb.perf.heldout.is_valid`` on this line: the one definition of validity."""
        from llmnb.perf.heldout import is_valid
        return is_valid(self.row(), text)


def heldout_examples(seed: int = SEED) -> list[HeldOut]:
    """The evaluation set, never in ``training_examples``: every item of a deterministic family
    once with a held-out phrasing (chosen by the seed), addition and products on their held-out
    operand pairs; then every item of a multi-answer family with each of its three held-out
    phrasings; then the rule families' ``heldout_instances`` (after the answer families, so
    that the lines before them are today's, unchanged)."""
    _, add_held, _, mul_held = arithmetic_split(seed)
    rng = random.Random(seed + 2)
    out: list[HeldOut] = []
    for family in FAMILIES:
        for fields, answers in _items(family, add_held, mul_held):
            if family in MULTI_FAMILIES:
                templates = TEMPLATES[family][1]
            else:
                templates = [rng.choice(TEMPLATES[family][1])]
            for template in templates:
                out.append(HeldOut(family, template.format(**fields), tuple(answers)))
    for inst, template in heldout_instances(seed):
        out.append(HeldOut(inst.rule, template.format(**inst.fields()), (), inst))
    return out


def chatml(prompt: str, system: str | None = None) -> str:
    """The ChatML rendering of one user turn with the assistant header (what the model sees)."""
    head = f"<|im_start|>system\n{system}<|im_end|>\n" if system is not None else ""
    return f"{head}<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def write_heldout(path: Path = HELDOUT_PATH) -> list[HeldOut]:
    """One JSON object per line: family, prompt, then answers, modes, answer (= answers[0])
    for an answer family, or modes, rule and its arguments for a rule family."""
    examples = heldout_examples()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for e in examples:
            fh.write(json.dumps(e.row(), ensure_ascii=False) + "\n")
    tmp.replace(path)
    return examples


def read_heldout(path: Path = HELDOUT_PATH) -> list[HeldOut]:
    """The held-out lines as written by ``write_heldout``."""
    with path.open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    out = []
    for r in rows:
        inst = (RuleInstance(r["rule"], tuple(r["items"]), r.get("old", ""), r.get("new", ""),
                             r.get("k", 0)) if "rule" in r else None)
        out.append(HeldOut(r["family"], r["prompt"], tuple(r.get("answers", ())), inst))
    return out


def structure(answers: list[list[int]], gen_length: int) -> dict[str, int]:
    """How one prompt's answers (token ids, end of text included) sit on a canvas of
    `gen_length`: the longest and shortest, and the positions where some but not all answers
    hold the same token (0 when one committed token identifies the answer)."""
    padded = [a + [a[-1]] * (gen_length - len(a)) for a in answers]
    shared_by_some = 0
    for column in zip(*padded):
        distinct = len(set(column))
        shared_by_some += 1 < distinct < len(column)
    return {"longest": max(map(len, answers)), "shortest": min(map(len, answers)),
            "partly_shared": shared_by_some}


def check(held: list[HeldOut], gen_length: int = 48) -> list[str]:
    """Problems with the held-out set under the tokenizer: an answer (+ end of turn) longer
    than `gen_length`; a multi-answer prompt whose answers differ in length or share a token
    at a position without all sharing it (pick, whose items may repeat across positions, is
    only checked for length); a rule item that is not one token (``item_tokens``)."""
    from tiny_tokenizer import IM_END, load_tokenizer
    tok = load_tokenizer()
    problems = [f"rule item {item!r} takes {n} tokens" for item, n in item_tokens(tok).items()
                if n != 1]
    for e in held:
        ids = [tok.encode(a).ids + [IM_END] for a in (e.answers or (e.answer,))]
        st = structure(ids, gen_length)
        if st["longest"] > gen_length:
            problems.append(f"{e.prompt!r}: an answer takes {st['longest']} > {gen_length} tokens")
        if e.family in MULTI_FAMILIES and e.family != "pick" and (
                st["longest"] != st["shortest"] or st["partly_shared"]):
            problems.append(f"{e.prompt!r}: lengths {st['shortest']}-{st['longest']}, "
                            f"{st['partly_shared']} partly shared positions")
    return problems


def item_tokens(tok: Any) -> dict[str, int]:
    """How many tokens each of ``RULE_ITEMS`` takes with `tok` (a ``tokenizers`` tokenizer),
    the more of its two forms: first in an answer, or after ", "."""
    return {item: max(len(tok.encode(item).ids), len(tok.encode("A, " + item).ids) - 2)
            for item in RULE_ITEMS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HELDOUT_PATH, help="held-out JSONL to write")
    ap.add_argument("--sample", type=int, default=0, help="print this many training examples")
    ap.add_argument("--check", action="store_true", help="also check answer lengths and "
                    "structure with the tokenizer (data/models/tiny-tokenizer.json)")
    args = ap.parse_args(argv)
    held = write_heldout(args.out)
    train = training_examples(20000)
    train_prompts = {e.prompt for e in train}
    train_instances = {e.instance for e in train if e.instance is not None}
    leaks = [e for e in held if e.prompt in train_prompts or e.instance in train_instances]
    if leaks:
        print(f"held-out prompts found in training: {leaks[:3]}", file=sys.stderr)
        return 1
    counts = {f: sum(e.family == f for e in held) for f in FAMILIES + list(RULE_FAMILIES)}
    single = sum(e.modes == 1 for e in held)
    print(f"wrote {len(held)} held-out prompts ({single} single-answer, {len(held) - single} "
          f"multi-answer) to {args.out}: {counts}", file=sys.stderr)
    if args.check:
        problems = check(held)
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            return 1
    for e in train[16:16 + args.sample]:
        d = dict(e.__dict__, instance=e.instance.row() if e.instance is not None else None)
        print(json.dumps(d, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
