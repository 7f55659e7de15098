#!/usr/bin/env python3
"""make_corpus.py — writes tests/text/corpus.json, the texts the tokenizer tests encode.

The corpus is data, committed; this script is how it was made, so a case can be added
by editing a list below and re-running (then re-run tools/oracle/make_tok_fixtures.py on
the GPU box to refresh tests/text/ref/). Every text is valid UTF-8; the invalid-UTF-8
cases live in tests/unit/test_tokenizer.c because JSON cannot carry them.
Usage: python3 tests/text/make_corpus.py  (from the repo root)."""
import json
import os

T = []


def add(*texts):
    T.extend(texts)


# ---- plain prose in many languages and scripts ----
add(
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you've seen it; they'll say it's fine, we'd agree, she's done.",
    "I'M SURE YOU'VE SEEN IT; THEY'LL SAY IT'S FINE, WE'D AGREE.",
    "don't Don't DON'T won't can't shouldn't y'all o'clock",
    "Contractions 'S 'T 'RE 'VE 'M 'LL 'D and 's 't 're 've 'm 'll 'd",
    "Ünïcödé façade naïve café résumé coöperate",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Größenordnung Straße Fußgängerübergänge",
    "¿Dónde está la biblioteca? ¡Allí!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "中文测试：我爱北京天安门，天安门上太阳升。",
    "繁體中文：這是一個測試句子，包含標點符號。",
    "日本語のテキスト：吾輩は猫である。名前はまだ無い。",
    "カタカナとひらがな、そして漢字が混ざった文章です。ｶﾀｶﾅ半角",
    "한국어 문장입니다. 안녕하세요, 반갑습니다!",
    "العربية: مرحبا بالعالم، كيف حالك؟",
    "עברית: שלום עולם, מה שלומך?",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं?",
    "বাংলা: আমি বাংলায় গান গাই।",
    "தமிழ்: வணக்கம் உலகம்",
    "ไทย: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Tiếng Việt: Tôi yêu tiếng nước tôi từ khi mới ra đời.",
    "ქართული ენა არის ლამაზი",
    "Հայերեն լեզու",
    "አማርኛ ቋንቋ ነው።",
    "Türkçe: İstanbul'da ılık bir gün. ıİiI",
    "Polski: Zażółć gęślą jaźń.",
    "Čeština: Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ᛫ᚠᛁᚱᚪ᛫ᚷᛖᚻᚹᛦᛚᚳᚢᛗ",
    "Mixed: English, 中文, русский, العربية, and 日本語 in one line.",
    "ܐܪܡܝܐ ܣܘܪܝܝܐ",
    "ᐊᓕᒍᖅ ᓂᕆᐊᖅ",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "Ελληνικά και English mixedWords camelCase PascalCase snake_case kebab-case",
    "HTTPServerError XMLHttpRequest iPhone eBay McDonald's O'Neill",
    "ǅemal ǈubljana ǋ title-case digraphs",
    "Ａｌｐｈａ fullwidth ＡＢＣ １２３ ！？",
)

# ---- code ----
add(
    "def f(x):\n    return x * 2\n",
    "import os\nimport sys\n\nclass Foo(object):\n    def __init__(self, a=1, *args, **kw):\n        self.a = a  # comment\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "const x = () => { console.log(`template ${x}`); };",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![1, 2, 3];\n    Ok(())\n}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<html><head><title>Test</title></head><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": {}}}",
    "$ ls -la /usr/local/bin | grep -E '^-rwx' && echo \"done\" > /dev/null 2>&1",
    "regex: ^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "https://example.com/path/to/page?query=1&other=two#fragment",
    "user@example.com, first.last+tag@sub.domain.org",
    "C:\\Users\\Name\\Documents\\file.txt",
    "a=b;c=d;e==f;g!=h;i<=j;k>=l;m&&n||o",
    "x+=1; y-=2; z*=3; w/=4; v%=5; u**=6; t//=7",
    "    indented with four spaces\n\tindented with a tab\n        eight spaces",
    "if x:\n\tif y:\n\t\tpass\n\telse:\n\t\treturn None\n",
    "// comment\n/* block\n * comment */\n/// doc comment",
    "#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n",
    "matrix = [[1, 2, 3],\n          [4, 5, 6],\n          [7, 8, 9]]",
    "\\begin{equation} E = mc^2 \\end{equation} $\\alpha + \\beta = \\gamma$",
    "```python\nprint('hello')\n```",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "- item one\n- item two\n  - nested item\n1. numbered",
    "@decorator\nasync def handler(req: Request) -> Response: ...",
    "std::vector<std::pair<int, std::string>> v{{1, \"a\"}};",
    "a->b.c->d[0]->e(f)->g",
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><root attr='1'/>",
    "key: value\nlist:\n  - a\n  - b\nnested:\n  k: v\n",
    "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-old\n+new\n",
    "0x1F 0xDEADBEEF 0b1010 0o777 1_000_000 3.14e-10 .5 5. 1e+100",
    "printf(\"%s:%d: %-10.3f %%\\n\", __FILE__, __LINE__, x);",
    "λx.λy.x y ∀x∈ℝ: x² ≥ 0 ∑_{i=1}^{n} i = n(n+1)/2",
    "/path/with/slashes/ and //double// and ///triple///",
    "foo/bar\n/baz\r\n/qux",
)

# ---- numbers ----
add(
    "1", "12", "123", "1234", "12345", "123456789", "1234567890123456789012345678901234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "1,234,567.89 and 1.234.567,89 and 1 234 567",
    "Phone: +1 (555) 123-4567, ext. 890",
    "Dates: 2024-01-15, 15/01/2024, Jan 15th 2024, 12:30:45.123Z",
    "Versions v1.2.3, 2.0.0-rc.1+build.5, Python3.11",
    "٠١٢٣٤٥٦٧٨٩ Arabic-Indic digits and ۰۱۲۳ Persian",
    "१२३४ Devanagari digits, ௧௨௩ Tamil digits",
    "１２３４５ fullwidth digits",
    "x² + y³ = z¹⁰ and H₂O, ½ ¼ ¾ ⅓ Ⅻ ① ⑳",
    "-42 +42 ±42 −42 42% 42‰ $42 €42 £42 ¥42 ₹42 ₿0.001",
    "0000000000 0000 007",
    "3rd 21st 100th 1990s 80's",
    "a1b2c3d4e5 abc123def456 123abc",
)

# ---- whitespace ----
add(
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\t\t\n\t",
    " leading space", "trailing space ", "  two leading", "two trailing  ",
    "multiple   spaces   between    words",
    "tabs\tbetween\t\twords",
    "line1\nline2\n\nline4\n\n\nline7",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t \n \r\n whitespace \n\t ",
    "word\u00a0nbsp\u00a0separated",
    "ideographic\u3000space\u3000here",
    "zero\u200bwidth\u200bspace",
    "em\u2003space and en\u2002space and thin\u2009space",
    "line\u2028separator and para\u2029separator",
    "\u000b vertical tab \u000c form feed \u0085 next line",
    "                                                  fifty spaces before",
    "end with newline\n",
    "\n\nstarts with newlines",
    "   \n   \n   ",
    "a \n b \n\n c \n\n\n d",
    "x" + " " * 17 + "y",
    "\t" * 12 + "deep",
)

# ---- emoji, joiners, flags, modifiers ----
add(
    "😀", "😀😃😄😁", "I ❤️ you 💕",
    "👨‍👩‍👧‍👦 family", "👩‍💻 technologist", "🏳️‍🌈 rainbow flag", "🏴‍☠️ pirate",
    "👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 skin tones",
    "🇺🇸 🇬🇧 🇯🇵 🇩🇪 flags", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland tag sequence",
    "1️⃣ 2️⃣ #️⃣ *️⃣ keycaps",
    "☺ ☺️ ✌ ✌️ text vs emoji presentation",
    "🧑🏽‍🤝‍🧑🏻 people holding hands",
    "Emoji in text: the 🚀 launched, 🌕 reached, 🎉!",
    "🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖🤖",
    "🐕‍🦺🐈‍⬛🐻‍❄️",
    "😀text😀text😀",
)

# ---- combining marks and normalization ----
add(
    "e\u0301 vs \u00e9",
    "cafe\u0301 (decomposed) vs caf\u00e9 (composed)",
    "A\u030a Å \u212b angstrom",
    "n\u0303 ñ o\u0308 ö u\u0308 ü",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0302\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333 zalgo",
    "\u0301 leading combining mark",
    "\u1100\u1161\u11a8 decomposed hangul vs 각",
    "ﬁ ﬂ ﬀ ligatures and ℌ ℍ ℕ letterlike",
    "Ⓐ Ⓑ ⓒ circled, ㎏ ㎞ squared",
    "क्षत्रिय conjuncts with virama",
    "\u0915\u093c nukta and \u0958 precomposed",
    "ḍ̇ q̣̇ multiple marks order \u0064\u0323\u0307 \u0064\u0307\u0323",
    "Ω \u2126 ohm sign and K \u212a kelvin",
    "ǆ ǅ Ǆ dz digraph",
    "İstanbul İ i̇ dotted",
)

# ---- special tokens written inline (each tokenizer has some) ----
add(
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>",
    "text<|endoftext|>more text",
    "<|endoftext|>",
    "<|im_start|><|im_end|><|im_start|>",
    "<|im_start",
    "im_start|>",
    "< |im_start| >",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
    "<｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜>",
    "<｜fim▁begin｜>code<｜fim▁hole｜>more<｜fim▁end｜>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|eot_id|><|eot_id|>",
    "<|reserved_special_token_5|> and <|reserved_special_token_250|>",
    "<s>[INST] Hello [/INST] Hi</s>",
    "<s> spaced </s> <unk>",
    "</s></s><s>",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_image><end_of_image><image_soft_token>",
    "<unused0> <unused10> <mask> [multimodal]",
    "<pad><eos>",
    "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|>",
    "<|start|>assistant<|channel|>analysis<|message|>Thinking...<|end|>",
    "<|constrain|>json<|message|>{}<|call|><|return|>",
    "<|startoftext|>x<|endoftext|>",
    "  <|im_start|>  spaced special  <|im_end|>  ",
    "\n<s>\n</s>\n",
    " <bos> spaced <eos> ",
    "a<|im_end|>b<s>c</s>d<bos>e<eos>f<|eot_id|>g<|end|>h",
    "<|IM_START|> wrong case",
    "<<|im_start|>> nested brackets",
)

# ---- long repeats ----
add(
    "a" * 1000,
    "ab" * 500,
    "abc " * 200,
    " " * 300,
    "\n" * 100,
    "\t" * 64,
    "1" * 500,
    "12" * 200,
    "😀" * 100,
    "中" * 300,
    "=" * 120,
    "-" * 80 + "\n" + "=" * 80,
    "." * 200,
    "!?" * 100,
    "the " * 250,
    "ÿ" * 100,
    "\u0301" * 50,
    "Buffalo buffalo Buffalo buffalo buffalo buffalo Buffalo buffalo.",
    "supercalifragilisticexpialidocious" * 20,
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "x" * 64 + " " + "y" * 64,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
    "▁" * 40,
    "▁▁hello▁world",
)

# ---- odd but valid UTF-8 ----
add(
    "",
    "\u0000 NUL inside",
    "control \u0001\u0002\u001f\u007f chars",
    "\ufeffBOM at start",
    "replacement \ufffd char",
    "noncharacters \ufffe \uffff \U0010ffff",
    "private use \ue000 \uf8ff \U000f0000",
    "supplementary 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝 𝟙𝟚𝟛",
    "ancient 𓀀𓀁 𐎀 cuneiform 𒀀",
    "RTL mark \u200f and LTR mark \u200e and \u202e override",
    "zero width joiner alone \u200d and non-joiner \u200c",
    "variation selector alone \ufe0f\ufe0e",
    "surrogate-adjacent \ud7ff \ue000",
    "max BMP \uffef and \U0001f9ff",
    "Ā ā Ġ ġ Ń ń byte-level look-alikes",
    "<0x41> <0xFF> byte token look-alikes",
    "▁ metaspace char alone",
    "Ġhello Ċnewline",
    "\\u0041 escaped \\n not newline",
    "tab\\tnot a tab",
    "'quoted' \"double\" `back` «guillemets» „low“ ‘single’ “double”",
    "… — – ‐ ‒ dashes and ellipsis",
    "™ © ® ° § ¶ † ‡ • ·",
    "←↑→↓↔ ⇒⇔ ∞ ≈ ≠ ≤ ≥",
    "♠♣♥♦ ♩♪♫ ☀☁☂",
    "box ┌─┐│└┘ ░▒▓█",
    "\x7f\x80\x9f C1 controls as code points",
    "a\u0000b\u0000c",
)

# ---- mixed realistic paragraphs ----
add(
    "The meeting is at 3:30pm on 2024-03-15. Please bring: (1) laptop, (2) charger, & (3) notes!",
    "Q: What's the capital of France?\nA: Paris.\n\nQ: And Japan?\nA: Tokyo (東京).",
    "User said: \"I can't believe it's already 2025!!!\" 🎉🎉🎉",
    "Price: $1,299.99 (was $1,599.99) — save 19%!",
    "Error: file 'config.json' not found at /etc/app/config.json (errno=2)",
    "Translation: 'cat' = 'gato' (es) = 'chat' (fr) = '猫' (ja) = 'кот' (ru)",
    "Dear Sir/Madam,\n\nI am writing to inquire about...\n\nSincerely,\nJohn Doe",
    "#hashtag @mention $TICKER &amp; %20encoded +plus ~tilde ^caret",
    "TODO(alice): fix this!!! FIXME: later... XXX",
    "He said, \"She said, 'They said, \"Hi.\"'\"",
    "Mr. Smith went to Washington D.C. at 5 p.m. e.g. i.e. etc.",
    "ALLCAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS !@#",
    "multi\nline\ntext with trailing spaces   \nand tabs\t\t\nend",
    "日本語とEnglishが混在するtext、そして数字123も。",
    "한국어와 English가 섞인 문장 123개",
    "Chinese punctuation：“引号”、《书名》【括号】……——",
    "Python's `len()` returns 3 for 'abc'; JavaScript's `'abc'.length` too.",
    "x_1, x_2, ..., x_n ∈ {0, 1}^n",
    "The 1st, 2nd, and 3rd places went to A (9.5), B (9.25), C (9.125).",
    "wow!!!!!!!!!! really???????? ok.........",
)

# ---- more scripts and edge mixes so every tokenizer sees rare merges ----
add(
    "Ꭰ Ꭱ Ꭲ Cherokee", "ꦲꦏ꧀ꦱꦫ Javanese", "ᠮᠣᠩᠭᠣᠯ Mongolian", "ⴰⵣⴰⵡⴰⵖ Tifinagh",
    "Ελληνικά ΑΒΓΔ αβγδ ςσΣ final sigma",
    "Ⅰ Ⅱ Ⅲ Ⅳ roman numerals ⅰⅱⅲ",
    "𝓗𝓮𝓵𝓵𝓸 math script",
    "ｈｔｔｐｓ：／／ｗｗｗ．ｅｘａｍｐｌｅ．ｃｏｍ",
    "ｶﾞｷﾞｸﾞ halfwidth katakana with voiced marks",
    "αβγ123δεζ456",
    "مرحبا123عالم",
    "שלום 123 עולם",
    "Hello\u200dWorld",
    "don't\u2019t smart apostrophe don\u2019t I\u2019m",
    "'s's's's's",
    "''''''",
    "...---...",
    "(((nested)))[[[brackets]]]{{{braces}}}",
    "a.b.c.d.e.f",
    "A-B-C_D_E",
    "1.2.3.4.5.6.7.8.9.10",
    "192.168.0.1:8080",
    "#FF00FF rgb(255, 0, 255)",
    "snake_case_variable_name_that_is_long",
    "CONSTANT_VALUE_X = 0x7FFFFFFF",
    "getElementById('main').addEventListener('click', onClick)",
    "  \n  def nested():\n      pass\n  ",
    "\u3000\u3000全角スペース",
    "tab\u0009and\u000bvertical",
    "/* unterminated comment",
    "\"unterminated string",
    "\\\\\\\\ backslashes \\\\",
)

seen = set()
out = []
for t in T:
    if t in seen:
        continue
    seen.add(t)
    out.append(t)
assert len(out) >= 200, len(out)
for t in out:
    t.encode("utf-8")  # every text must be valid UTF-8 (no lone surrogates)
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "corpus.json"), "w", encoding="utf-8") as f:
    json.dump({"texts": out}, f, ensure_ascii=False, indent=0)
    f.write("\n")
print(len(out), "texts")
