from transformers import AutoTokenizer, PreTrainedTokenizerFast

from minirl.tokenizer import CHARACTERS, VOCAB, build_char_tokenizer


def test_is_a_real_fast_tokenizer_with_specials():
    tok = build_char_tokenizer()
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert len(tok) == len(VOCAB) == 22


def test_one_token_per_character_and_bos_first():
    tok = build_char_tokenizer()
    ids = tok("3,5,7:026=")["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert len(ids) == 1 + len("3,5,7:026=")
    assert tok.decode(ids, skip_special_tokens=True) == "3,5,7:026="


def test_save_pretrained_round_trip(tmp_path):
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    text = "1,2,3:006=" + "(1+2)*3"
    assert again(text)["input_ids"] == tok(text)["input_ids"]
    assert (again.pad_token_id, again.eos_token_id, again.bos_token_id) == (0, 2, 1)
    assert again.padding_side == "left"


def test_left_padding_and_batch_decode():
    tok = build_char_tokenizer()
    enc = tok(["1,2,3:006=", "1:1="], padding=True)
    assert enc["attention_mask"][1][:6] == [0] * 6
    assert tok.batch_decode([[6, 13, 7, 2, 0]], skip_special_tokens=True) == ["3+4"]

