"""The language of a question, by a fixed script rule, and which fitted language stands in for it.

The gate keeps one threshold per language of its off-topic bank (English, Japanese); a
question is ranked with its own language's threshold, else the nearest fitted one. The
rule reads the script only, so it is predictable: any hiragana or katakana is Japanese,
else any Hangul Korean, else any CJK ideograph Chinese, else English (Latin and every
other script).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_IDEOGRAPH = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


def question_language(text: str) -> str:
    """"ja", "ko", "zh" or "en" for ``text`` by its script (see the module's rule)."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    if _IDEOGRAPH.search(text):
        return "zh"
    return "en"


def nearest_language(language: str, fitted: Iterable[str]) -> str:
    """The fitted language whose threshold a question in ``language`` uses: itself when
    fitted, Japanese for Chinese and Korean when it is fitted, else English when fitted,
    else the first fitted. ``fitted`` must not be empty."""
    fitted = list(fitted)
    if language in fitted:
        return language
    if language in ("zh", "ko") and "ja" in fitted:
        return "ja"
    return "en" if "en" in fitted else fitted[0]
