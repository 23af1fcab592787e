"""A seeded synthetic chat corpus for llmnb's tiny trained models (issue 4).

The task families mirror diffuse-cpp's eight benchmark prompts (reference/diffuse-cpp.md §7):
factual QA (capitals from a fixed table), arithmetic (two-digit addition, small products),
translation EN->FR and EN->ES from a fixed phrase table, listing (planets, days, months ...),
tiny Python functions, two-sentence explanations and four-line poems. Every answer is a fixed
function of the task (never of the phrasing), so a held-out prompt has one exact-match answer.

The training corpus is regenerated from the seed on every run (``training_examples``), never
stored; the held-out set (unseen phrasings, unseen addition operand pairs, products with the
operands in the unseen order) is written to ``data/eval/tiny_heldout.jsonl``:

    python tools/tiny_corpus.py                 # write data/eval/tiny_heldout.jsonl, print stats
    python tools/tiny_corpus.py --sample 5      # also print a few training examples
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

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
}

FAMILIES = list(TEMPLATES)

# How often each family is drawn for training (arithmetic has the most distinct items).
WEIGHTS = {"capitals": 0.1, "addition": 0.3, "multiplication": 0.13, "translate_fr": 0.08,
           "translate_es": 0.08, "listing": 0.07, "python": 0.08, "explain": 0.08, "poem": 0.08}

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
           mul_pairs: list[tuple[int, int]]) -> list[tuple[dict[str, str], str]]:
    """Every (template fields, answer) of a family."""
    if family == "capitals":
        return [({"c": c}, f"The capital of {c} is {cap}.") for c, cap in CAPITALS]
    if family == "addition":
        return [({"a": str(a), "b": str(b)}, f"{a} + {b} = {a + b}") for a, b in add_pairs]
    if family == "multiplication":
        return [({"a": str(a), "b": str(b)}, f"{a} x {b} = {a * b}") for a, b in mul_pairs]
    if family == "translate_fr":
        return [({"p": en}, fr) for en, fr, _ in PHRASES]
    if family == "translate_es":
        return [({"p": en}, es) for en, _, es in PHRASES]
    if family == "listing":
        return [({"x": name}, answer) for names, answer in LISTS for name in names]
    if family == "python":
        return [({"d": d}, code) for d, code in PYTHON]
    if family == "explain":
        return [({"t": t}, text) for t, text in EXPLANATIONS]
    if family == "poem":
        return [({"t": t}, text) for t, text in POEMS]
    raise ValueError(f"unknown family {family!r}")


def training_examples(n: int, seed: int = SEED) -> list[Example]:
    """`n` training examples drawn from the seed: families by ``WEIGHTS``, a random training
    phrasing and item each, 30% with the benchmark's system prompt; the eight benchmark
    prompts come first (each twice, with and without the system prompt)."""
    add_train, _, mul_train, _ = arithmetic_split(seed)
    items = {f: _items(f, add_train, mul_train) for f in FAMILIES}
    rng = random.Random(seed + 1)
    out: list[Example] = []
    for prompt in BENCHMARK_PROMPTS:
        answer = benchmark_answer(prompt)
        out.append(Example("benchmark", prompt, answer))
        out.append(Example("benchmark", prompt, answer, SYSTEM))
    families = list(WEIGHTS)
    weights = [WEIGHTS[f] for f in families]
    while len(out) < n:
        family = rng.choices(families, weights)[0]
        fields, answer = rng.choice(items[family])
        template = rng.choice(TEMPLATES[family][0])
        system = SYSTEM if rng.random() < SYSTEM_FRACTION else None
        out.append(Example(family, template.format(**fields), answer, system))
    return out[:n]


def benchmark_answer(prompt: str) -> str:
    """The fixed answer to one of the eight benchmark prompts (they use training phrasings)."""
    add_train, _, mul_train, _ = arithmetic_split()
    for family in FAMILIES:
        for fields, answer in _items(family, add_train, mul_train):
            if TEMPLATES[family][0][0].format(**fields) == prompt:
                return answer
    raise ValueError(f"not a benchmark prompt: {prompt!r}")


def heldout_examples(seed: int = SEED) -> list[Example]:
    """The evaluation set: every item once with a held-out phrasing (chosen by the seed);
    addition and products on their held-out operand pairs. Never in ``training_examples``."""
    _, add_held, _, mul_held = arithmetic_split(seed)
    rng = random.Random(seed + 2)
    out: list[Example] = []
    for family in FAMILIES:
        for fields, answer in _items(family, add_held, mul_held):
            template = rng.choice(TEMPLATES[family][1])
            out.append(Example(family, template.format(**fields), answer))
    return out


def chatml(prompt: str, system: str | None = None) -> str:
    """The ChatML rendering of one user turn with the assistant header (what the model sees)."""
    head = f"<|im_start|>system\n{system}<|im_end|>\n" if system is not None else ""
    return f"{head}<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def write_heldout(path: Path = HELDOUT_PATH) -> list[Example]:
    examples = heldout_examples()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for e in examples:
            fh.write(json.dumps({"family": e.family, "prompt": e.prompt, "answer": e.answer},
                                ensure_ascii=False) + "\n")
    return examples


def read_heldout(path: Path = HELDOUT_PATH) -> list[Example]:
    with path.open(encoding="utf-8") as fh:
        return [Example(**json.loads(line)) for line in fh if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HELDOUT_PATH, help="held-out JSONL to write")
    ap.add_argument("--sample", type=int, default=0, help="print this many training examples")
    args = ap.parse_args(argv)
    held = write_heldout(args.out)
    train = training_examples(20000)
    train_prompts = {e.prompt for e in train}
    leaks = [e for e in held if e.prompt in train_prompts]
    if leaks:
        print(f"held-out prompts found in training: {leaks[:3]}", file=sys.stderr)
        return 1
    counts = {f: sum(e.family == f for e in held) for f in FAMILIES}
    print(f"wrote {len(held)} held-out examples to {args.out}: {counts}", file=sys.stderr)
    for e in train[16:16 + args.sample]:
        print(json.dumps(e.__dict__, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
