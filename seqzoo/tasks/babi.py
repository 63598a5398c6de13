"""bAbI memory tasks of the Recurrent Memory Transformer: facts hidden in book text, the question at the end.

Bulatov et al., "Scaling Transformer to 1M tokens and beyond with RMT" (arXiv:2304.11062, §4) and BABILong
(Kuratov et al., arXiv:2406.10149). One or more facts are placed in noise text drawn from Project Gutenberg
books, the question ends the input; the input is exactly N·L tokens (N = ``n_segments``, L = ``segment_size``):

    memorize   one qa1-style fact at token 0                     ("Mary went to the office." ... "Where is Mary?")
    detect     one qa1-style fact at the start of a random segment
    reasoning  both statements of a bAbI qa4 story (one answers, one distracts), each in a random segment
    qa2, qa3   the supporting facts (or the whole story) of a bAbI qa2 / qa3 item, in story order

The answer is a 6-way classification over the places (``head="class"``, encoder) or generated tokens
(``head="generate"``: tail ``question + " Answer: " + answer + <eos>``, scored on the answer and eos).
A sample is a pure function of (seed, split, task, N, L, index). Data are read from paths the caller gives; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import settings
from ..errors import InputError, MissingFileError
from .base import IGNORE_INDEX, Task, register_task
from .tokenizers import ByteTokenizer, GPT2Tokenizer

NAMES = ("Mary", "John", "Daniel", "Sandra")
ACTIONS = ("moved", "went", "went back", "journeyed", "travelled")
PLACES = ("bathroom", "hallway", "garden", "office", "bedroom", "kitchen")  # label order 0..5
QA5_ANSWERS = ("Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk")
TASK_FILES = {
    "reasoning": "qa4_two-arg-relations",
    "qa2": "qa2_two-supporting-facts",
    "qa3": "qa3_three-supporting-facts",
    "qa5": "qa5_three-arg-relations",
}
TASK_IDS = {"memorize": 0, "detect": 1, "reasoning": 2, "qa2": 3, "qa3": 4, "qa5": 5}
SPLIT_IDS = {"train": 0, "valid": 1, "test": 2}
NOISE_SPLITS = {"train": (0.0, 0.90), "valid": (0.90, 0.95), "test": (0.95, 1.0)}
SKIP_NOISE_FILES = {"README.md", "ORIGINAL_README.txt"}


def labels_for(task: str) -> tuple[str, ...]:
    return QA5_ANSWERS if task == "qa5" else PLACES


def default_data_dir() -> Path:
    """``$SEQZOO_DATA`` or ``../shared/data`` beside the repository (the offline data folder)."""
    return settings.data_dir() or Path(__file__).resolve().parents[2].parent / "shared" / "data"


# ------------------------------------------------------------------ bAbI files
@dataclass(frozen=True)
class QA:
    story: tuple[str, ...]  # all statements of the story before the question, in order
    support: tuple[str, ...]  # the supporting statements, in story order
    question: str
    answer: str


def parse_babi(path: str | Path) -> list[QA]:
    """Parse a bAbI file: ``ID sentence`` lines, questions ``ID question<TAB>answer<TAB>support ids``."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"bAbI file not found: {path}")
    items: list[QA] = []
    story: list[tuple[int, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        lid_s, text = line.split(" ", 1)
        lid = int(lid_s)
        if lid == 1:
            story = []
        if "\t" in text:
            q, ans, sup = text.split("\t")
            keep = {int(s) for s in sup.split()}
            items.append(
                QA(
                    story=tuple(s for _, s in story),
                    support=tuple(s for i, s in story if i in keep),
                    question=q.strip(),
                    answer=ans.strip(),
                )
            )
        else:
            story.append((lid, text.strip()))
    return items


def babi_path(babi_dir: str | Path, task: str, split: str, lang: str = "en-10k") -> Path:
    """File of ``task``'s split (valid comes from the train file); en-10k qa3 train falls back to ``en``."""
    name = TASK_FILES[task]
    kind = "test" if split == "test" else "train"
    path = Path(babi_dir) / lang / f"{name}_{kind}.txt"
    if not path.is_file() and lang == "en-10k":
        alt = Path(babi_dir) / "en" / f"{name}_{kind}.txt"
        if alt.is_file():
            warnings.warn(f"{path} is missing; using {alt} (1k training questions)", stacklevel=2)
            return alt
    if not path.is_file():
        raise MissingFileError(f"bAbI file not found: {path}")
    return path


@lru_cache(maxsize=32)
def babi_items(babi_dir: str, task: str, split: str, lang: str = "en-10k") -> tuple[QA, ...]:
    """valid = the last 10 % of the train items, train = the rest, test = the test file."""
    items = parse_babi(babi_path(babi_dir, task, split, lang))
    if split == "test":
        return tuple(items)
    cut = len(items) - len(items) // 10
    return tuple(items[:cut] if split == "train" else items[cut:])


# ------------------------------------------------------------------ noise text
def noise_files(noise_dir: str | Path) -> list[Path]:
    noise_dir = Path(noise_dir)
    if not noise_dir.is_dir():
        raise MissingFileError(f"noise text folder not found: {noise_dir}")
    files = sorted(p for p in noise_dir.iterdir() if p.suffix == ".txt" and p.name not in SKIP_NOISE_FILES)
    if not files:
        raise MissingFileError(f"no .txt books in {noise_dir}")
    return files


def read_book(path: Path) -> str:
    """UTF-8; two NLTK Gutenberg files (chesterton-ball, shakespeare-caesar) are Latin-1 and are read as such."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def noise_streams(noise_dir: str | Path, tokenizer, cache_dir: str | Path | None = None) -> dict[str, np.ndarray]:
    """Per split, one token stream: each book's token range [a, b) of the split, books in sorted file order,
    joined by the tokens of "\\n\\n". Cached as .npy (keyed by the files' names, sizes and the tokenizer)."""
    files = noise_files(noise_dir)
    spec = json.dumps({"files": [(p.name, p.stat().st_size) for p in files], "tok": tokenizer.spec()}, sort_keys=True)
    key = hashlib.sha256(spec.encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir else None
    if cache is not None:
        paths = {s: cache / f"noise-{key}-{s}.npy" for s in NOISE_SPLITS}
        if all(p.is_file() for p in paths.values()):
            return {s: np.load(p) for s, p in paths.items()}
    sep = tokenizer.encode("\n\n")
    books = [tokenizer.encode(read_book(p)) for p in files]
    out = {}
    for split, (lo, hi) in NOISE_SPLITS.items():
        stream: list[int] = []
        for i, ids in enumerate(books):
            n = len(ids)
            if i:
                stream += sep
            stream += ids[int(lo * n) : int(hi * n)]
        out[split] = np.asarray(stream, dtype=np.int64)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        for s, arr in out.items():
            tmp = cache / f".noise-{key}-{s}.{os.getpid()}.npy"
            np.save(tmp, arr)
            os.replace(tmp, paths[s])
    return out


# ------------------------------------------------------------------ the task
@register_task("babi_memory")
class BabiMemory(Task):
    """RMT memory tasks; ``kind`` "cls" (``head="class"``, targets (n,)) or "lm" (``head="generate"``)."""

    def __init__(
        self,
        task: str = "memorize",
        n_segments: int = 3,
        segment_size: int = 32,
        head: str = "class",
        placement: str = "segment_start",
        facts: str = "supporting",
        tokenizer: str = "gpt2",
        data_dir: str | Path | None = None,
        babi_dir: str | Path | None = None,
        noise_dir: str | Path | None = None,
        bpe_dir: str | Path | None = None,
        lang: str = "en-10k",
        remap: bool = True,
        cache_dir: str | Path | None = None,
    ):
        if task not in TASK_IDS:
            raise InputError(f"task must be one of {sorted(TASK_IDS)}, got {task!r}")
        if not isinstance(n_segments, int) or n_segments < 1:
            raise InputError(f"n_segments must be an int >= 1, got {n_segments!r}")
        if not isinstance(segment_size, int) or segment_size < 1:
            raise InputError(f"segment_size must be an int >= 1, got {segment_size!r}")
        if head not in ("class", "generate"):
            raise InputError(f"head must be 'class' or 'generate', got {head!r}")
        if placement not in ("segment_start", "uniform"):
            raise InputError(f"placement must be 'segment_start' or 'uniform', got {placement!r}")
        if facts not in ("supporting", "story"):
            raise InputError(f"facts must be 'supporting' or 'story', got {facts!r}")
        data = Path(data_dir) if data_dir is not None else default_data_dir()
        self.babi_dir = Path(babi_dir) if babi_dir is not None else data / "babi" / "tasks_1-20_v1-2"
        self.noise_dir = Path(noise_dir) if noise_dir is not None else data / "gutenberg-nltk"
        self.bpe_dir = Path(bpe_dir) if bpe_dir is not None else data / "gpt2-bpe"
        self.task, self.n_segments, self.segment_size = task, n_segments, segment_size
        self.head, self.placement, self.facts, self.lang = head, placement, facts, lang
        self.tokenizer_kind, self.remap = tokenizer, remap
        if tokenizer == "gpt2":
            self.tok = GPT2Tokenizer(self.bpe_dir)
        elif tokenizer == "byte":
            self.tok = ByteTokenizer()
        else:
            raise InputError(f"tokenizer must be 'gpt2' or 'byte', got {tokenizer!r}")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "seqzoo" / "babi"
        self.kind = "cls" if head == "class" else "lm"
        self.labels = labels_for(task)
        self.seq_len = n_segments * segment_size
        eos = getattr(self.tok, "eos_token_id", None)
        self.raw_eos = int(eos) if eos is not None else self.tok.encode("\n")[0]
        self.noise = noise_streams(self.noise_dir, self.tok, self.cache_dir)
        if task in TASK_FILES:
            for split in SPLIT_IDS:  # parse now: a missing file fails at construction
                babi_items(str(self.babi_dir), task, split, lang)
        self._build_vocab()

    # ---------------------------------------------------------- vocabulary
    def _all_strings(self) -> list[str]:
        strs = [" " + f"{n} {a} to the {p}." for n in NAMES for a in ACTIONS for p in PLACES]
        strs += [" " + f"Where is {n}?" for n in NAMES] + [" Answer: " + a for a in self.labels]
        if self.task in TASK_FILES:
            for split in SPLIT_IDS:
                for qa in babi_items(str(self.babi_dir), self.task, split, self.lang):
                    strs += [" " + s for s in qa.story] + [" " + qa.question, " Answer: " + qa.answer]
        return strs

    def _build_vocab(self) -> None:
        """``remap``: a compact vocabulary of the ids that occur (noise, facts, questions, answers, eos)."""
        if not self.remap:
            self.vocab = None
            self.vocab_size = int(self.tok.vocab_size)
            self.eos_id = self.raw_eos
            return
        used = set(np.unique(np.concatenate(list(self.noise.values()))).tolist())
        for s in self._all_strings():
            used.update(self._enc_raw(s))
        used.add(self.raw_eos)
        self.vocab = np.array(sorted(used), dtype=np.int64)  # compact id -> raw tokenizer id
        self.vocab_size = len(self.vocab)
        self.eos_id = int(np.searchsorted(self.vocab, self.raw_eos))
        self.noise = {s: np.searchsorted(self.vocab, a) for s, a in self.noise.items()}

    def _enc_raw(self, text: str) -> tuple[int, ...]:
        cache = self.__dict__.setdefault("_enc_cache", {})
        if text not in cache:
            cache[text] = tuple(self.tok.encode(text))
        return cache[text]

    def encode(self, text: str) -> list[int]:
        raw = self._enc_raw(text)
        if self.vocab is None:
            return list(raw)
        idx = np.searchsorted(self.vocab, raw)
        if np.any(idx >= len(self.vocab)) or np.any(self.vocab[np.minimum(idx, len(self.vocab) - 1)] != raw):
            raise InputError(f"text {text!r} has tokens outside the task's compact vocabulary")
        return idx.tolist()

    def decode(self, ids) -> str:
        raw = [int(i) for i in ids] if self.vocab is None else [int(self.vocab[int(i)]) for i in ids]
        return self.tok.decode(raw)

    # -------------------------------------------------------------- samples
    def sample(self, split: str, index: int, seed: int = 0) -> dict[str, Any]:
        """One sample as a dict: input_ids (N·L), label, fact_offsets, fact_segments, labels_mask, answer."""
        if split not in SPLIT_IDS:
            raise InputError(f"split must be one of {sorted(SPLIT_IDS)}, got {split!r}")
        N, L = self.n_segments, self.segment_size
        rng = np.random.default_rng([int(seed), SPLIT_IDS[split], TASK_IDS[self.task], N, L, int(index)])
        if self.task in ("memorize", "detect"):
            name, act, place = NAMES[rng.integers(4)], ACTIONS[rng.integers(5)], PLACES[rng.integers(6)]
            facts, question, answer = [f"{name} {act} to the {place}."], f"Where is {name}?", place
        else:
            items = babi_items(str(self.babi_dir), self.task, split, self.lang)
            qa = items[int(rng.integers(len(items)))]
            story = self.task == "reasoning" or self.facts == "story"
            facts = list(qa.story if story else qa.support)
            question, answer = qa.question, qa.answer
        F = [self.encode(" " + f) for f in facts]
        nF = sum(len(f) for f in F)
        if self.head == "class":
            tail = self.encode(" " + question)
        else:
            tail = self.encode(" " + question + " Answer: " + answer) + [self.eos_id]
        budget = N * L - len(tail)  # facts must end before the tail
        longest = max(len(f) for f in F)
        if len(tail) + longest > L:
            raise InputError(
                f"segment_size={L} is too small: question tail ({len(tail)} tokens) plus the longest fact "
                f"({longest}) must fit in one segment"
            )
        if nF > budget:
            raise InputError(f"facts ({nF} tokens) do not fit in n_segments*segment_size - tail = {budget} tokens")
        if self.task == "memorize":
            starts = [0]
        elif self.placement == "segment_start":
            starts = [s * L for s in sorted(rng.integers(0, N, size=len(F)).tolist())]
        else:  # "uniform": sorted cuts in the noise, shifted by the earlier facts
            cuts = sorted(rng.integers(0, budget - nF + 1, size=len(F)).tolist())
            starts = [c + sum(len(g) for g in F[:i]) for i, c in enumerate(cuts)]
        offs, end = [], 0  # non-overlapping, in story order, before the tail
        for i, (s, f) in enumerate(zip(starts, F)):
            o = min(max(s, end), budget - sum(len(g) for g in F[i:]))
            offs.append(o)
            end = o + len(f)
        stream = self.noise[split]
        n_noise = budget - nF
        start = int(rng.integers(len(stream)))
        noise = np.take(stream, np.arange(start, start + n_noise), mode="wrap").tolist()  # cyclic window
        ids: list[int] = []
        j = 0
        for o, f in zip(offs, F):
            take = o - len(ids)
            ids += noise[j : j + take]
            j += take
            ids += f
        ids += noise[j:] + tail
        assert len(ids) == N * L
        mask = [False] * (N * L)
        if self.head == "generate":
            n_ans = len(self.encode(" Answer: " + answer)) - len(self.encode(" Answer:"))
            for t in range(N * L - n_ans - 1, N * L):  # answer tokens and eos
                mask[t] = True
        return {
            "input_ids": ids,
            "label": self.labels.index(answer),
            "answer": answer,
            "fact_offsets": offs,
            "fact_segments": [o // L for o in offs],
            "labels_mask": mask,
            "n_answer_tokens": n_ans if self.head == "generate" else 0,
        }

    def build_samples(self, n: int, seed: int, split: str = "train") -> list[dict[str, Any]]:
        return [self.sample(split, i, seed) for i in range(n)]

    def build(self, n: int, seed: int, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs (n, N·L), targets)``: targets ``(n,)`` class ids, or ``(n, N·L)`` aligned next-token targets
        (-100 except at the positions that predict the answer tokens and eos)."""
        if not isinstance(n, int) or n < 1:
            raise InputError(f"n must be an int >= 1, got {n!r}")
        samples = self.build_samples(n, seed, split)
        x = torch.tensor([s["input_ids"] for s in samples], dtype=torch.long)  # (n, N·L)
        if self.head == "class":
            return x, torch.tensor([s["label"] for s in samples], dtype=torch.long)
        mask = torch.tensor([s["labels_mask"] for s in samples], dtype=torch.bool)
        y = torch.full_like(x, IGNORE_INDEX)
        y[:, :-1] = torch.where(mask[:, 1:], x[:, 1:], IGNORE_INDEX)  # position t predicts token t+1
        return x, y

    def config(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "n_segments": self.n_segments,
            "segment_size": self.segment_size,
            "head": self.head,
            "placement": self.placement,
            "facts": self.facts,
            "tokenizer": self.tokenizer_kind,
            "babi_dir": str(self.babi_dir),
            "noise_dir": str(self.noise_dir),
            "lang": self.lang,
            "remap": self.remap,
            "vocab_size": self.vocab_size,
        }

    def with_segments(self, n_segments: int) -> BabiMemory:
        """The same task (shared vocabulary and noise) at another number of segments."""
        import copy

        if not isinstance(n_segments, int) or n_segments < 1:
            raise InputError(f"n_segments must be an int >= 1, got {n_segments!r}")
        other = copy.copy(self)
        other.n_segments = n_segments
        other.seq_len = n_segments * self.segment_size
        return other

    def no_memory_ceiling(self, samples: list[dict[str, Any]]) -> float:
        """Best accuracy without memory: samples whose facts all sit in the last segment can be answered,
        the rest are guessed (1 / #labels)."""
        N = self.n_segments
        seen = [all(s == N - 1 for s in x["fact_segments"]) for x in samples]
        chance = 1.0 / len(self.labels)
        return float(np.mean([1.0 if v else chance for v in seen]))
