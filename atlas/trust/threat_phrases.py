"""What an injection asks for, by meaning: approve things, stop asking the person, send the
conversations elsewhere, ignore the rules. English (matched with the other patterns of
threats.py, so through every spelling) and a small phrase set in German, French, Spanish, Russian,
Chinese and Japanese (matched on the text as written, casefolded: ß reads ss).

Each pattern is linear: no back-references, every repetition bounded or over disjoint tokens.
A phrase set cannot be complete; what it misses is left to the person reviewing memory and skills
(see docs/trust.md, "Memory and skills: injection scans").
"""

from __future__ import annotations

# A bounded stretch within one sentence, as in threats.py.
_SENTENCE_CHAR = r"(?:[^.!?\n]|\.(?=\S))"
_GAP = rf"{_SENTENCE_CHAR}{{0,80}}?"


def after(start: str, span: int = 80) -> str:
    """`start`, then a stretch of at most `span` characters of its sentence that does not run
    over another `start`. A text of many starts (`if) if) if)…`) was read ~80 characters from
    each (3.5 µs a character, 0.2 s for 64,000); now each character is read from one start. It
    matches the same texts: a match whose stretch held another start matches from that one."""
    return rf"{start}(?:(?!{start}){_SENTENCE_CHAR}){{0,{span}}}?"


_ACTIONS = (
    r"(?:commands?|requests?|calls?|tool calls?|actions?|prompts?|questions?|permissions?|"
    r"approvals?|operations?|changes?|things?)"
)

_PRE_APPROVED = r"\bpre-?(?:approved|authori[sz]ed)\b"
_TREAT = r"\btreat\b"
_WHEN = r"\b(?:when|whenever|if)\b"

# (why, pattern) on casefolded NFKC text with whitespace collapsed; also run on the skeleton.
ENGLISH: list[tuple[str, str]] = [
    (
        "an instruction to approve on the person's behalf",
        r"\b(?:always|automatically|auto-?|blindly)\s*(?:say yes|approve|allow|accept|grant|"
        r"authori[sz]e|confirm)\b|"
        r"\b(?:approve|allow|accept|authori[sz]e|grant|confirm|say yes to)\s+(?:\w+\s+){0,2}?"
        rf"(?:every|all|any|each)\s+(?:\w+\s+){{0,2}}?{_ACTIONS}\b|"
        r"\b(?:approve|authori[sz]e|say yes to) (?:everything|anything|whatever)\b|"
        rf"{after(_PRE_APPROVED)}"
        r"\b(?:all|every|everything|anything|any)\b|"
        r"\b(?:has|have) (?:already )?(?:approved|authori[sz]ed) (?:all|every|everything|any)\b|"
        rf"{after(_TREAT)}\bas (?:pre-?)?(?:approved|authori[sz]ed|allowed|confirmed)\b|"
        rf"{after(_WHEN)}\b(?:asks?|asked|prompts?|prompted|approval|"
        rf"permission|confirmation)\b{_GAP}\b(?:say|answer|reply|respond|choose|pick|click|"
        r"press|select|tap)\s+(?:with\s+)?[\"'“]?(?:yes|allow|approve|ok)\b",
    ),
    (
        "an instruction to stop asking the person",
        r"\b(?:never|do not|don'?t|stop|no longer|no need to|need not|skip)\s+(?:ask|asking|"
        r"check|checking|confirm|confirming|consult|consulting)\s+(?:with\s+)?(?:the\s+)?"
        r"(?:(?:user|owner|person|human|me|anyone|them)\s+)?(?:first\s+)?(?:before|prior to)\b|"
        # Anchored on "without", a rare word: an action word before it within a gap made the
        # pattern cost 80 steps at every "send" of a long text.
        r"\bwithout\s+(?:asking|checking|confirming|consulting|prompting)\s+(?:(?:the\s+)?"
        r"(?:user|owner|person|human|anyone|first)|me first|for\s+(?:permission|approval|"
        r"confirmation))\b|\bwithout\s+(?:any\s+)?(?:permission|approval|confirmation) from\b",
    ),
    (
        "an order to send the conversations elsewhere",
        r"\b(?:send|forward|e-?mail|mail|upload|post|paste|publish|share|copy|sync|transmit|"
        r"relay|mirror|leak|log|dump|push|export|stream)\b(?:\s+\S+){0,4}?\s+(?:conversations?|"
        r"chats\b|chat(?:'s)? (?:history|logs?|transcripts?)|(?:this|our|the whole|the entire|the "
        r"full|every|each) chat\b|(?:full|whole|entire|complete|chat|session|conversation) "
        r"transcripts?|transcripts? of (?:this|our|the|every|each|all|my|your)\b|transcripts\b|"
        r"(?:message|conversation|session|chat) (?:history|logs?)|dialogues?)",
    ),
    (
        "text that closes a tool's result or opens a system message",
        r"<\s*(?:/\s*)?(?:un)?trusted[\s_-]?tool[\s_-]?result\b|<\s*(?:/\s*)?(?:tool_result|"
        r"function_results?|system-reminder)\s*>",
    ),
]

# On the casefolded text as written (the skeleton would turn Cyrillic into Latin letters).
MULTILINGUAL: list[tuple[str, str]] = [
    (
        "an instruction to ignore the rules",
        # German, French, Spanish, Russian, Chinese, Japanese.
        r"\b(?:ignorier|vergiss|missachte)\w*\s+(?:\w+\s+){0,3}?(?:anweisungen|regeln|"
        r"instruktionen|vorgaben|befehle)\b|"
        r"\b(?:ignore[rsz]?|oublie[rsz]?)\s+(?:\w+\s+){0,3}?(?:instructions|consignes|règles)\b|"
        r"\b(?:ignora|ignore[sn]?|olvida|olvide[sn]?)\s+(?:\w+\s+){0,3}?(?:instrucciones|reglas|"
        r"normas|indicaciones)\b|"
        r"(?:игнорир|забуд|забыв|не обращай внимания на)\w*\s+(?:\w+\s+){0,3}?(?:инструкци|"
        r"правил|указани|предписани)|"
        r"(?:忽略|无视|無視|忘记|忘記|不要理会|不要理會).{0,12}?(?:指令|指示|规则|規則|说明|說明|"
        r"提示|命令)|"
        r"(?:指示|命令|ルール|規則)を(?:すべて|全て)?(?:無視|忘れ)",
    ),
    (
        "an instruction to approve on the person's behalf",
        r"\b(?:genehmig|bestätig|erlaub|akzeptier)\w*\s+(?:\w+\s+){0,3}?(?:jede[nrs]?|alle|"
        r"sämtliche|alles)\b|\b(?:immer|automatisch|stets)\s+(?:\w+\s+)?(?:genehmigen|"
        r"bestätigen|erlauben|zustimmen)\b|"
        r"\bapprouve[rsz]?\s+(?:\w+\s+){0,2}?(?:toute?s?|chaque|tout)\b|"
        r"\b(?:toujours|automatiquement)\s+(?:\w+\s+)?approuve|"
        r"\b(?:aprueba|apruebe|aprobar|acepta|acepte)\w*\s+(?:\w+\s+){0,2}?(?:todos?|todas?|"
        r"cada)\b|\b(?:siempre|automáticamente)\s+(?:\w+\s+)?(?:aprueba|aprobar|acepta)|"
        r"(?:одобря|одобри|подтвержда|разреша)\w*\s+(?:\w+\s+){0,2}?(?:все|всё|каждую|каждый|"
        r"любые|любой)|"
        r"(?:自动|自動|总是|總是|一律|全部|直接)(?:地)?(?:批准|同意|允许|允許|确认|確認)|"
        r"(?:批准|同意|允许|允許)(?:所有|一切|全部|每个|每個|任何)|"
        r"(?:すべて|全て|全部|自動的に|常に|いつも).{0,12}?(?:承認|許可)",
    ),
    (
        "an instruction to stop asking the person",
        r"\bohne\s+(?:\w+\s+){0,3}?(?:zu\s+)?(?:fragen|nachzufragen|rückfrage|nachfrage|"
        r"bestätigung|genehmigung|erlaubnis)\b|\bfrag\w*\s+(?:\w+\s+){0,2}?nicht\s+(?:mehr\s+)?"
        r"(?:nach|um)\b|"
        r"\bsans\s+(?:\w+\s+){0,2}?(?:demander|confirmation|autorisation|permission)\b|"
        r"\bne\s+(?:\w+\s+){0,2}?demande[sz]?\s+(?:plus|jamais|pas)\b|"
        r"\bsin\s+(?:\w+\s+){0,2}?(?:preguntar|confirmación|permiso|autorización)\b|"
        r"\bno\s+(?:\w+\s+){0,2}?(?:preguntes|pregunte|pidas|pida)\b|"
        r"(?:не спрашива|без\s+(?:вопросов|подтверждени|разрешени|спроса))|"
        r"(?:不要|无需|無需|不必|不用|别|別|无须|無須)(?:再)?(?:询问|詢問|问|問|征求|徵求|请求|請求|"
        r"确认|確認)|"
        r"(?:確認|質問|許可を求め|尋ね|聞か)\w{0,3}?(?:せず|しないで|なしで|ずに)",
    ),
    (
        "an order to send the conversations elsewhere",
        r"\b(?:send|schick|leit|lad|übertrag|kopier|poste|veröffentlich)\w*\s+(?:\S+\s+){0,5}?"
        r"(?:\w*verlauf|konversation\w*|unterhaltung\w*|gespräche?\w*|transkript\w*|chats)\b|"
        r"\b(?:envo|transf[eè]r|publi|copi|partag)\w*\s+(?:\S+\s+){0,5}?(?:conversations?|"
        r"historique|transcriptions?|discussions?)\b|"
        r"\b(?:env[ií]|reenv[ií]|sub[eai]|publi|copi|compart)\w*\s+(?:\S+\s+){0,5}?"
        r"(?:conversaci\w+|historial|transcripci\w+|chats?)\b|"
        r"(?:отправ|пересыл|перешл|выгруж|загруж|копир|публику)\w*\s+(?:\S+\s+){0,5}?"
        r"(?:переписк|разговор|диалог|истори\w* (?:чата|сообщений)|чат)|"
        r"(?:发送|發送|转发|轉發|上传|上傳|发到|發到|发给|發給|同步|复制|複製|抄送).{0,20}?"
        r"(?:对话|對話|聊天|会话|會話)|"
        r"(?:对话|對話|聊天记录|聊天記錄|会话|會話).{0,20}?(?:发送|發送|转发|轉發|上传|上傳|发到|"
        r"發到|发给|發給)|"
        r"(?:会話|チャット|やり取り|対話).{0,40}?(?:送信|転送|アップロード|送っ|送る|共有)",
    ),
]
