"""The character tokenizer of the tiny Countdown policy, as a real `transformers` tokenizer.

One token per character of the compact Countdown language (`3,5,7:026=3*7+5`), plus three specials.
Building it on `tokenizers` + `PreTrainedTokenizerFast` (instead of a hand-written dict) means the
tiny policy goes through exactly the same code path as any Hugging Face model: `save_pretrained`,
`AutoTokenizer.from_pretrained`, `batch_decode(skip_special_tokens=True)`, padding, and so on.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)
# Every character the compact Countdown prompt and its completions can contain.
CHARACTERS = "0123456789+-*/(),:="
VOCAB = {tok: i for i, tok in enumerate(SPECIALS + tuple(CHARACTERS))}  # 22 symbols
# ... and the worked-steps task's (tasks/worked.py): the same plus its restart mark, appended so ids stay put
WORKED_CHARACTERS = CHARACTERS + "|"


def build_char_tokenizer(characters: str = CHARACTERS) -> PreTrainedTokenizerFast:
    """A character-level `PreTrainedTokenizerFast`: `<bos>` is prepended, unknown characters are an error.
    The default `characters` give 22 symbols (3 specials + 19 characters).

    >>> tok = build_char_tokenizer()
    >>> tok("3,5,7:026=").input_ids[:4]   # <bos> 3 , 5
    [1, 6, 19, 8]
    """
    vocab = {tok: i for i, tok in enumerate(SPECIALS + tuple(characters))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per char
    core.decoder = decoders.Fuse()  # join characters back without spaces
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="left",  # prompts are left-padded so every completion starts at the same column
        model_max_length=256,
    )
    return tokenizer

