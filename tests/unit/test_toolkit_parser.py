"""The HQueue shell's command parser: the seed's examples, quote variants, hashes, errors."""

from __future__ import annotations

import pytest
from hqueue.toolkit.commands import to_bytes
from hqueue.toolkit.parser import Command, ParseError, parse, tokenize

SEED_CONFIG = {
    "hbase.hqueue.partitionsPerRegion": "4",
    "hbase.hstore.compaction.min": "16",
    "hbase.hstore.compaction.max": "32",
}


def values(line: str) -> tuple[str, list[object]]:
    command = parse(line)
    assert isinstance(command, Command)
    return command.name, [arg.value for arg in command.args]


# -- the seed's examples (section 4.1), copied with their typographic quotes and prompts -----


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("create \u2018q1\u2032, 32, 86400", ("create", ["q1", 32, 86400])),
        ("hqueue> create \u2018q1\u2032, 32, 86400", ("create", ["q1", 32, 86400])),
        (
            "hqueue> create \u2018q1\u2032, 32, 86400, "
            "{\u2018hbase.hqueue.partitionsPerRegion\u2019 => \u20194\u2032, "
            "\u2018hbase.hstore.compaction.min\u2019 => \u201916\u2032, "
            "\u2018hbase.hstore.compaction.max\u2019 => \u201932\u2032}",
            ("create", ["q1", 32, 86400, SEED_CONFIG]),
        ),
        (
            "create 'q1', 32, 86400, {'hbase.hqueue.partitionsPerRegion' => '4', "
            "'hbase.hstore.compaction.min' => '16', 'hbase.hstore.compaction.max' => '32'}",
            ("create", ["q1", 32, 86400, SEED_CONFIG]),
        ),
        (
            "truncate_queue 'replication_dev_2_test_queue'",
            ("truncate_queue", ["replication_dev_2_test_queue"]),
        ),
        (
            "hqueue(main):013:0> truncate_queue 'replication_dev_2_test_queue'",
            ("truncate_queue", ["replication_dev_2_test_queue"]),
        ),
        (
            "add_subscriber 'replication_dev_2_test_queue', 'subscriber_1'",
            ("add_subscriber", ["replication_dev_2_test_queue", "subscriber_1"]),
        ),
        (
            "hqueue(main):040:0> delete_subscriber 'replication_dev_2_test_queue', 'subscriber_1'",
            ("delete_subscriber", ["replication_dev_2_test_queue", "subscriber_1"]),
        ),
        ("\u2022 hqueue> create \u2018q1\u2032, 32, 86400", ("create", ["q1", 32, 86400])),
    ],
)
def test_seed_examples(line: str, expected: tuple[str, list[object]]) -> None:
    assert values(line) == expected


def test_every_command_of_the_brief() -> None:
    assert values("disable 'q1'") == ("disable", ["q1"])
    assert values("enable 'q1'") == ("enable", ["q1"])
    assert values("drop 'q1'") == ("drop", ["q1"])
    assert values("list") == ("list", [])
    assert values("describe 'q1'") == ("describe", ["q1"])
    assert values("put 'q1', 'topic', 'value'") == ("put", ["q1", "topic", "value"])
    assert values("put 'q1', 'topic', 'value', 7") == ("put", ["q1", "topic", "value", 7])
    assert values("tail 'q1', 3") == ("tail", ["q1", 3])
    assert values("tail 'q1', 3, 20") == ("tail", ["q1", 3, 20])
    assert values("locations 'q1'") == ("locations", ["q1"])
    assert values("help") == ("help", [])
    assert values("exit") == ("exit", [])


# -- quotes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "quoted",
    [
        "'q 1'",
        '"q 1"',
        "\u2018q 1\u2019",  # left and right quotation marks
        "\u2018q 1\u2032",  # left quotation mark and prime, as in the seed
        "\u2019q 1\u2032",  # right quotation mark and prime: the seed's hash values
        "\u2032q 1\u2032",
        "\u201cq 1\u201d",  # double quotation marks
        "\u201cq 1\u2033",
        "'q 1\u2019",  # an ASCII quote closed by a typographic one
    ],
)
def test_quote_variants(quoted: str) -> None:
    assert values(f"describe {quoted}") == ("describe", ["q 1"])


def test_other_quote_family_is_plain_text() -> None:
    assert values("put 'q1', 't', 'say \"hi\"'") == ("put", ["q1", "t", 'say "hi"'])
    assert values("put 'q1', 't', \"it's\"") == ("put", ["q1", "t", "it's"])
    assert values("put 'q1', 't', \u201cit\u2019s\u201d") == ("put", ["q1", "t", "it\u2019s"])


def test_escapes() -> None:
    assert values(r"put 'q', 't', 'it\'s'")[1][2] == "it's"
    assert values(r'put "q", "t", "a\nb\tc\\d"')[1][2] == "a\nb\tc\\d"
    assert values(r"put 'q', 't', '\x41\x00'")[1][2] == "A\0"
    assert values(r"put 'q', 't', 'C:\path'")[1][2] == "C:\\path"  # unknown escape kept


def test_high_byte_escape_gives_the_raw_byte() -> None:
    value = values(r"put 'q', 't', '\xff\xfe ok'")[1][2]
    assert isinstance(value, str)
    assert to_bytes(value) == b"\xff\xfe ok"


def test_empty_string() -> None:
    assert values("put 'q', '', ''") == ("put", ["q", "", ""])


# -- arguments: numbers, bare words, commas, parentheses, comments --------------------------


def test_integers() -> None:
    assert values("tail 'q', -1, +5, 0") == ("tail", ["q", -1, 5, 0])


def test_bare_words_are_strings() -> None:
    command = parse("describe my_queue-1.x")
    assert command is not None
    assert command.args[0].value == "my_queue-1.x"
    assert command.args[0].quoted is False
    assert parse("describe 'q'").args[0].quoted is True  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "line",
    [
        "create 'q1', 32, 86400",
        "create 'q1' 32 86400",
        "create   'q1' ,32,86400  ",
        "\tcreate 'q1',\t32 ,\t86400",
        "create('q1', 32, 86400)",
        "create ( 'q1' 32 86400 )",
        "create 'q1'\uff0c 32\uff0c 86400",  # full-width commas
        "create 'q1', 32, 86400 # a trailing comment",
        "create 'q1', 32, 86400\n",
        "create 'q1', 32, 86400\r\n",
    ],
)
def test_spacing_and_comma_variations(line: str) -> None:
    assert values(line) == ("create", ["q1", 32, 86400])


@pytest.mark.parametrize("line", ["", "   ", "\n", "# a comment", "   # indented comment"])
def test_blank_and_comment_lines(line: str) -> None:
    assert parse(line) is None


def test_hash_inside_a_string_is_not_a_comment() -> None:
    assert values("put 'q', 't', '#not a comment'") == ("put", ["q", "t", "#not a comment"])


def test_columns_are_one_based_and_count_the_prompt() -> None:
    command = parse("hqueue> drop 'q1'")
    assert command is not None
    assert command.column == 9
    assert command.args[0].column == 14


# -- hashes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{}", {}),
        ("{ }", {}),
        ("{'a' => 'b'}", {"a": "b"}),
        ("{'a'=>'b','c'=>'d'}", {"a": "b", "c": "d"}),
        ("{'a' => 'b', }", {"a": "b"}),
        ("{'a' => 'b' 'c' => 'd'}", {"a": "b", "c": "d"}),
        ("{'n' => 16}", {"n": "16"}),  # config is map<string, string>
        ("{hbase.hqueue.compression => gz}", {"hbase.hqueue.compression": "gz"}),
        ('{"k" => "v"}', {"k": "v"}),
    ],
)
def test_hashes(text: str, expected: dict[str, str]) -> None:
    assert values(f"create 'q', 1, 2, {text}") == ("create", ["q", 1, 2, expected])


def test_hash_argument_kind() -> None:
    command = parse("create 'q', 1, 2, {'a' => 'b'}")
    assert command is not None
    assert [arg.kind for arg in command.args] == ["string", "integer", "integer", "hash"]


# -- errors point at the column --------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ("create 'q1", 8, "unterminated string"),
        ("create 'q1', 32, {'a' => 'b'", 29, "missing '}'"),
        ("create 'q1', 32, {'a' => }", 26, "expected a hash value"),
        ("create 'q1', 32, {'a' 'b'}", 23, "expected '=>'"),
        ("create 'q1', 32, {'a' => 'b', 'a' => 'c'}", 31, "duplicate hash key 'a'"),
        ("create 'q1', 32, {{}}", 19, "expected a hash key"),
        ("create 'q1', 32, {'a' =>", 25, "expected a hash value, got end of line"),
        ("create 12abc", 8, "invalid number '12abc'"),
        ("create , 'q1'", 8, "expected an argument, got ','"),
        ("create 'q1',, 32", 13, "expected an argument, got ','"),
        ("create 'q1',", 13, "expected an argument"),
        ("create ('q1', 32", 17, "missing ')'"),
        ("create ('q1') 32", 15, "unexpected '32' after ')'"),
        ("create 'q1' => 32", 13, "expected an argument, got '=>'"),
        ("create 'q1' }", 13, "expected an argument, got '}'"),
        ("create @q1", 8, "unexpected character '@'"),
        ("'q1' create", 1, "expected a command name"),
        ("32", 1, "expected a command name"),
        ("hqueue> 'q1'", 9, "expected a command name"),
    ],
)
def test_errors_name_the_column(line: str, column: int, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(line)
    assert caught.value.column == column
    assert message in caught.value.message
    assert str(caught.value).startswith(f"column {column}: ")


def test_pretty_error_puts_a_caret_under_the_column() -> None:
    with pytest.raises(ParseError) as caught:
        parse("create 'q1', 32, x y}")
    lines = caught.value.pretty().splitlines()
    assert lines[0] == "column 21: expected an argument, got '}'"
    assert lines[1] == "  create 'q1', 32, x y}"
    assert lines[2].index("^") == lines[1].index("}")


def test_pretty_error_with_line_number_and_hint() -> None:
    error = ParseError("missing 'ttl'", "create 'q1', 32", 16, hint="  usage: create ...")
    assert error.pretty(4).splitlines() == [
        "line 4, column 16: missing 'ttl'",
        "  create 'q1', 32",
        "                 ^",
        "  usage: create ...",
    ]


def test_parse_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unterminated"):
        parse('put "q')


def test_tokenize_ends_with_end_token() -> None:
    kinds = [tok.kind for tok in tokenize("create('q', 1, {a => 2})")]
    assert kinds == [
        "WORD",
        "LPAREN",
        "STRING",
        "COMMA",
        "INT",
        "COMMA",
        "LBRACE",
        "WORD",
        "ARROW",
        "INT",
        "RBRACE",
        "RPAREN",
        "END",
    ]


def test_no_evaluation() -> None:
    # Ruby/Python-looking code is just text or a parse error, never run
    assert values("describe __import__") == ("describe", ["__import__"])
    with pytest.raises(ParseError):
        parse("describe `rm -rf /`")
