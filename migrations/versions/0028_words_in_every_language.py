"""Words in every language: the word index folds, splits and stems text of any script.

    companion_lexemes(text, for_query)   the words of a text, as the index keeps them
    companion_words(text)                tsvector of a stored text (messages.tsv, passages.tsv)
    companion_query_words(text)          every lexeme a query's words may be stored as
    messages.tsv, passages.tsv           now companion_words(...), recomputed
    message_terms, message_words,
    passage_terms, passage_words         rebuilt from them

Until now `tsv` was `to_tsvector('english', ...)`: Postgres' parser splits at spaces, so a
Japanese or Chinese sentence was one "word" and a name inside it could not be found
("ミソ" in "私の猫の名前はミソで…"); every other language got English stemming, so Russian
"Мурка" did not find "Муркой"; accents and full-width letters had to match exactly.

One function now reads a text for both sides, the index and the query, the same way:

1. NFKC (full-width and half-width forms, ligatures, circled digits become plain), lower
   case with Unicode's simple case mapping (the collation pg_c_utf8 from PostgreSQL 17 on,
   so the server's locale does not matter; on 16 a libc C.UTF-8 collation), final sigma as
   sigma, ß as ss. A text of ASCII alone takes a shortcut that gives the same words.
2. Runs of Han, kana and Hangul (written without spaces) give every pair of neighbouring
   characters, and the index also keeps each ideograph or syllable alone (a query of one
   character finds it; a longer query looks for its pairs only). Thai, Lao, Khmer and
   Burmese give every three neighbouring characters.
3. Other runs of letters and digits are words. Cyrillic ones go to the Russian stemmer
   (ё as е), Greek, Arabic, Armenian, Devanagari and Tamil to theirs; Latin-script words lose
   their accents (café and cafe are one word) and are stemmed in the language whose common
   words the text holds most (thirteen languages that Postgres stems; English on a tie or
   when none is found), stop words left out as each stemmer lists them. Lexemes of a
   language other than English carry its code ("de:schwest"), so a German stem cannot match
   an English word it happens to equal. Numbers are kept as they are.
4. A query's Latin-script words are stemmed in all thirteen languages, and each stem is
   tagged with every language code: a query finds a word whichever language its message was
   taken to be in, and whichever stemmer gets it right ("Sofas" is "sofas" to the German
   stemmer, "sofa" to the English one). A query's Russian word of four letters or more is
   also looked for as written and without its last letter, stemmed or not: the stemmer cuts
   names too far in one case and not in another ("мар" for "Маруся" but "марус" for
   "Марусей", "макс" for "Максим" but "максим" for "Максима"). A query's lexemes that no
   message holds weigh nothing (core.memory.keywords).

Words over 100 characters are left out, and at most 60,000 lexemes of one text are kept
(a tsvector holds at most 1 MB). The upgrade recomputes both columns (the tables are
rewritten) and lists and counts every word again; writes to them wait meanwhile. The
downgrade goes back to the `english` configuration.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-04
"""

import json

from alembic import op
from sqlalchemy import text

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None
rewrites_tables = True  # recomputes the words of every message and passage

# The stemmers for Latin-script text, in the order that breaks a tie, with the common words
# (as written, lower case) that say a text is in that language.
LATIN = (
    (
        "en",
        "english",
        "a an and are at be been but did do for had has have he i in is it just "
        "ll m me my not of on re s she so t that the they this to ve was we were what with "
        "you your",
    ),
    (
        "de",
        "german",
        "aber auch auf bin das dem den der die doch ein eine einen es für habe hat "
        "ich im ist ja mal mein meine mit nicht noch nur oder schon sehr sich sie und von war wenn "
        "wie wir zu",
    ),
    (
        "es",
        "spanish",
        "al como con de del el en es está estoy hay la las le lo los me mi muy más "
        "no para pero por que qué se su también tengo un una y ya yo",
    ),
    (
        "fr",
        "french",
        "au avec ce c ça d dans de des du elle en est et il j je l la le les mais n "
        "ne nous pas pour qu que s suis sur très un une vous à ai",
    ),
    (
        "it",
        "italian",
        "anche che ci come con del della di e gli ho il io la le lo ma mi molto non "
        "per perché questo sei si sono un una è",
    ),
    (
        "pt",
        "portuguese",
        "a as com da de do e em essa está estou eu isso mas me meu minha muito "
        "na no não o os para que se também tem um uma você é",
    ),
    (
        "nl",
        "dutch",
        "al dat de dit een en er heb het hij ik is je maar met mijn naar niet nog "
        "ook op te van voor was wat wij zij zijn",
    ),
    (
        "sv",
        "swedish",
        "att av den det du en ett för han har hon i inte jag med men mig min och "
        "också om på som så till var vi är",
    ),
    (
        "da",
        "danish",
        "af at de den det du en er et for han har hun i ikke jeg med men mig min "
        "og også på som så til var vi",
    ),
    (
        "no",
        "norwegian",
        "at av de den det du en er et for han har hun i ikke jeg med meg men min "
        "og også på som så til var vi",
    ),
    (
        "fi",
        "finnish",
        "ei että he hän ja jo kuin kun me minä mitä mutta myös niin nyt oli olen "
        "ole on ovat se sinä te tämä vain",
    ),
    (
        "hu",
        "hungarian",
        "a az csak de egy ez ha hogy is meg mert mi már még nagyon nem te ti "
        "vagy van volt én és ők",
    ),
    (
        "tr",
        "turkish",
        "ama ben benim bir bu da daha de değil gibi için ile kadar mi mu ne o "
        "sen sonra var ve yok çok şey",
    ),
)

CJK = (
    r"\u3040-\u30ff\u3005-\u3007\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    r"\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\U00020000-\U0003ffff"
)
IDEOGRAPHS = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0003ffff"
TRIPLES = r"\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"  # Thai, Lao, Burmese, Khmer
# What separates words: ASCII and Latin-1 punctuation and symbols, general punctuation,
# arrows, mathematical and technical signs, shapes, CJK punctuation, full-width punctuation,
# emoji, and the punctuation of a few scripts.
SEPARATORS = (
    r"\u0001-\u002f\u003a-\u0040\u005b-\u0060\u007b-\u00a9\u00ab-\u00b4\u00b6-\u00b9"
    r"\u00bb-\u00bf\u00d7\u00f7\u2000-\u2bff\u2e00-\u2e7f\u3000-\u3004\u3008-\u303f"
    r"\ufe10-\ufe6f\uff00-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65\ufff0-\uffff"
    r"\U0001f000-\U0001faff\u0964\u0965\u060c\u061b\u061f\u066a-\u066d\u06d4\u055a-\u055f"
    r"\u0589\u05be\u05c0\u05c3\u05c6\u05f3\u05f4\u0e2f\u0e46\u0e4f\u0e5a\u0e5b\u104a\u104b"
    r"\u17d4-\u17da"
)
# Scripts with no stemmer in Postgres: IPA, Hebrew, Syriac, Thaana, N'Ko, the Indic scripts
# but Devanagari and Tamil, Georgian, Ethiopic, Cherokee: their words are kept as written.
UNSTEMMED = (
    r"\u0250-\u02ff\u0590-\u05ff\u0700-\u08ff\u0980-\u0b7f\u0c00-\u0dff\u10a0-\u10ff"
    r"\u1200-\u139f"
)
MARKS = r"[\u0300-\u036f]"  # the combining accents of Latin and Greek letters
MAX_LEXEMES = 60_000


def _detect() -> str:
    """Each common word, scored for the languages that use it: 256^i for language i."""
    score: dict[str, int] = {}
    for i, (_, _, words) in enumerate(LATIN):
        for word in words.split():
            score[word] = score.get(word, 0) + 256**i
    return json.dumps(score, ensure_ascii=False, separators=(",", ":")).replace("'", "''")


def lexemes_function(collation: str | None, utf8: bool) -> str:
    """CREATE FUNCTION companion_lexemes, for this server's collations and encoding."""
    lower = f'lower(%s COLLATE "{collation}")' if collation else "lower(%s)"
    nfkc = "normalize(left(body, 100000), NFKC)" if utf8 else "left(body, 100000)"
    folded = lower % nfkc
    if utf8:
        folded = f"replace(translate({folded}, 'ς', 'σ'), 'ß', 'ss')"
    unaccented = f"regexp_replace(normalize(t, NFD), '{MARKS}', '', 'g')" if utf8 else "t"
    codes = "ARRAY[" + ",".join(f"'{code}'" for code, _, _ in LATIN) + "]"
    dicts = "ARRAY[" + ",".join(f"'{name}_stem'" for _, name, _ in LATIN) + "]::regdictionary[]"
    languages = len(LATIN)
    return f"""
CREATE FUNCTION companion_lexemes(body text, for_query boolean) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $f$
DECLARE
    codes text[] := {codes};
    dicts regdictionary[] := {dicts};
    m text[];
    t text;
    c text;
    n int;
    i int;
    j int;
    words text[] := '{{}}';  -- Latin-script words as written, for the common words
    bare text[] := '{{}}';   -- the same without accents, for the stemmers
    out text[] := '{{}}';
    stems text[];
    score numeric := 0;
    v numeric;
    best int := 1;
    most int := 0;
BEGIN
    IF body !~ '[^\\u0001-\\u007f]' THEN
        words := regexp_split_to_array(lower(body COLLATE "C"), '[^a-z0-9]+');
        bare := words;
    ELSE
        FOR m IN SELECT regexp_matches({folded},
            '([{CJK}]+)|([{TRIPLES}]+)|([^{SEPARATORS}{CJK}{TRIPLES}]+)', 'g')
        LOOP
            IF m[1] IS NOT NULL THEN
                n := char_length(m[1]);
                FOR i IN 1 .. n - 1 LOOP out := out || substr(m[1], i, 2); END LOOP;
                IF n = 1 THEN
                    out := out || m[1];
                ELSIF NOT for_query THEN
                    FOR i IN 1 .. n LOOP
                        c := substr(m[1], i, 1);
                        IF c ~ '[{IDEOGRAPHS}]' THEN out := out || c; END IF;
                    END LOOP;
                END IF;
            ELSIF m[2] IS NOT NULL THEN
                n := char_length(m[2]);
                IF n < 3 THEN
                    out := out || m[2];
                ELSE
                    FOR i IN 1 .. n - 2 LOOP out := out || substr(m[2], i, 3); END LOOP;
                END IF;
            ELSIF char_length(m[3]) <= 100 THEN
                t := m[3];
                IF t ~ '^[a-z0-9]+$' THEN
                    words := words || t;
                    bare := bare || t;
                ELSIF t ~ '[\\u0400-\\u052f]' THEN
                    t := translate(t, 'ё', 'е');
                    out := out || (ts_lexize('russian_stem', t))[1];
                    IF for_query AND char_length(t) >= 4 THEN  -- see 4. above
                        out := out || t || left(t, -1)
                            || (ts_lexize('russian_stem', left(t, -1)))[1];
                    END IF;
                ELSIF t ~ '[\\u0370-\\u03ff\\u1f00-\\u1fff]' THEN
                    out := out || (ts_lexize('greek_stem', {unaccented}))[1];
                ELSIF t ~ '[\\u0600-\\u06ff\\u0750-\\u077f]' THEN
                    out := out || (ts_lexize('arabic_stem', t))[1];
                ELSIF t ~ '[\\u0530-\\u058f]' THEN
                    out := out || (ts_lexize('armenian_stem', t))[1];
                ELSIF t ~ '[\\u0900-\\u097f]' THEN
                    out := out || (ts_lexize('hindi_stem', t))[1];
                ELSIF t ~ '[\\u0b80-\\u0bff]' THEN
                    out := out || (ts_lexize('tamil_stem', t))[1];
                ELSIF t ~ '[{UNSTEMMED}]' THEN
                    out := out || t;
                ELSE
                    words := words || t;
                    bare := bare || {unaccented};
                END IF;
            END IF;
        END LOOP;
    END IF;
    n := cardinality(words);
    IF NOT for_query THEN
        FOR i IN 1 .. least(n, 200) LOOP
            v := ('{_detect()}'::jsonb ->> words[i])::numeric;
            IF v IS NOT NULL THEN score := score + v; END IF;
        END LOOP;
        FOR j IN 1 .. {languages} LOOP
            i := trunc(score / 256::numeric ^ (j - 1))::numeric % 256;
            IF i > most THEN most := i; best := j; END IF;
        END LOOP;
    END IF;
    FOR i IN 1 .. n LOOP
        t := bare[i];
        IF t = '' THEN CONTINUE; END IF;
        IF t ~ '^[0-9]+$' THEN out := out || t; CONTINUE; END IF;
        IF for_query THEN
            stems := '{{}}';
            FOR j IN 1 .. {languages} LOOP
                stems := stems || (ts_lexize(dicts[j], t))[1];
            END LOOP;
            FOREACH c IN ARRAY ARRAY(SELECT DISTINCT s FROM unnest(stems) s WHERE s <> '') LOOP
                FOR j IN 1 .. {languages} LOOP
                    out := out || (CASE j WHEN 1 THEN '' ELSE codes[j] || ':' END || c);
                END LOOP;
            END LOOP;
        ELSE
            out := out || (CASE best WHEN 1 THEN '' ELSE codes[best] || ':' END
                           || (ts_lexize(dicts[best], t))[1]);
        END IF;
    END LOOP;
    RETURN array_remove(out, NULL);
END
$f$
"""


WORDS = f"""
CREATE FUNCTION companion_words(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN array_to_tsvector((companion_lexemes(body, false))[1:{MAX_LEXEMES}])
"""
QUERY_WORDS = """
CREATE FUNCTION companion_query_words(body text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN companion_lexemes(body, true)
"""

COLUMNS = (
    ("messages", "coalesce(search_text, '')"),
    ("passages", "text"),
)

# Every word listed and counted again, from the new `tsv` (as 0019, 0021, 0022 and 0024).
REBUILD = (
    "TRUNCATE message_terms, message_words, passage_terms, passage_words",
    "INSERT INTO message_terms (tenant_id, agent_id, lexeme, messages) "
    "SELECT tenant_id, agent_id, lexeme, count(*) FROM messages, "
    "unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme "
    "WHERE search_text IS NOT NULL GROUP BY tenant_id, agent_id, lexeme",
    "INSERT INTO message_words (tenant_id, agent_id, lexeme, message_id, words) "
    "SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM messages, "
    "unnest(tsvector_to_array(tsv)) AS lexeme WHERE search_text IS NOT NULL",
    "INSERT INTO passage_words (tenant_id, agent_id, lexeme, passage_id, words) "
    "SELECT tenant_id, agent_id, lexeme, id, length(tsv) FROM passages, "
    "unnest(tsvector_to_array(tsv)) AS lexeme",
    "INSERT INTO passage_terms (tenant_id, agent_id, lexeme, passages) "
    "SELECT tenant_id, agent_id, lexeme, count(*) FROM passages, "
    "unnest(array_append(tsvector_to_array(tsv), '')) AS lexeme "
    "GROUP BY tenant_id, agent_id, lexeme",
)


def _collation() -> str | None:
    """A collation whose lower() follows Unicode whatever the server's locale, if any."""
    found = (
        op.get_bind()
        .execute(
            text(
                "SELECT collname FROM pg_collation WHERE collname IN ('pg_c_utf8', 'C.utf8', "
                "'C.UTF-8') AND collencoding IN (-1, pg_char_to_encoding('UTF8')) "
                "ORDER BY collname = 'pg_c_utf8' DESC, collname LIMIT 1"
            )
        )
        .scalar()
    )
    return found


def _set_tsv(expression: str) -> None:
    for table, source in COLUMNS:
        op.execute(f"ALTER TABLE {table} DROP COLUMN tsv")
        op.execute(
            f"ALTER TABLE {table} ADD COLUMN tsv tsvector "
            f"GENERATED ALWAYS AS ({expression % source}) STORED"
        )
    for statement in REBUILD:
        op.execute(statement)


def upgrade() -> None:
    utf8 = op.get_bind().execute(text("SHOW server_encoding")).scalar() == "UTF8"
    # As the driver's SQL: the word scores hold ":" and digits, which SQLAlchemy would read as
    # bind parameters.
    op.get_bind().exec_driver_sql(lexemes_function(_collation() if utf8 else None, utf8))
    op.execute(WORDS)
    op.execute(QUERY_WORDS)
    _set_tsv("companion_words(%s)")


def downgrade() -> None:
    _set_tsv("to_tsvector('english', %s)")
    op.execute("DROP FUNCTION companion_query_words(text)")
    op.execute("DROP FUNCTION companion_words(text)")
    op.execute("DROP FUNCTION companion_lexemes(text, boolean)")
