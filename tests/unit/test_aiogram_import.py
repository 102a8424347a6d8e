"""aiogram imported with its models' builds deferred: fewer built at start, all usable."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import json, sys
from atlas.channels.telegram.aiogram_import import import_aiogram
held = import_aiogram()
from aiogram.types import Message, Update
from aiogram.methods import SendMessage, SetMyCommands
built_before = Message.__pydantic_complete__
method_built_before = SetMyCommands.__pydantic_complete__
# Without it pydantic tries to build each method as it is declared, and fails (the types it
# carries are not built yet): the same incomplete class, at a cost.
method_deferred = SetMyCommands.model_config.get("defer_build")
sent = SendMessage(chat_id=1, text="hello", reply_markup={"inline_keyboard": [[
    {"text": "ok", "callback_data": "y"}]]})
update = Update.model_validate({
    "update_id": 7,
    "message": {
        "message_id": 5, "date": 1700000000, "text": "hi",
        "chat": {"id": 1, "type": "private"},
        "from": {"id": 2, "is_bot": False, "first_name": "Ann"},
        "reply_markup": {"inline_keyboard": [[{"text": "ok", "callback_data": "y"}]]},
    },
})
print(json.dumps({
    "held": held,
    "again": import_aiogram(),
    "built_before": built_before,
    "method_built_before": method_built_before,
    "method_deferred": method_deferred,
    "sent": [sent.text, sent.reply_markup.inline_keyboard[0][0].callback_data],
    "method_built_after": SendMessage.__pydantic_complete__,
    "text": update.message.text,
    "sender": update.message.from_user.first_name,
    "button": update.message.reply_markup.inline_keyboard[0][0].callback_data,
}))
"""


def run_probe() -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


def test_models_are_built_on_first_use_and_parse_a_whole_update() -> None:
    seen = run_probe()
    assert seen["held"] > 200  # aiogram.types' models, left to build when first used
    assert seen["again"] == 0  # a second call imports nothing
    assert seen["built_before"] is False
    # The API methods too: each builds, complete with the types it carries, when first made.
    assert seen["method_built_before"] is False
    assert seen["method_deferred"] is True
    assert seen["sent"] == ["hello", "y"]
    assert seen["method_built_after"] is True
    # Nested models (the sender, a keyboard) resolve the names each model was handed.
    assert (seen["text"], seen["sender"], seen["button"]) == ("hi", "Ann", "y")


PIN_PROBE = r"""
import json
from atlas.channels.telegram.aiogram_import import import_aiogram
import_aiogram()
from atlas.channels.telegram.models import pin_response_models
pinned = pin_response_models()
from aiogram.methods import EditMessageText, GetUpdates, Response, SendMessage, SetMyCommands
from aiogram.types import Message, Update
chat = {"id": 1, "type": "private"}
raw = {"ok": True, "result": [{"update_id": 3, "message": {
    "message_id": 9, "date": 1700000000, "chat": chat, "text": "and?",
    "reply_to_message": {"message_id": 8, "date": 1700000000, "chat": chat, "text": "first"},
}}]}
updates = Response[GetUpdates.__returning__].model_validate(raw).result
edited = Response[EditMessageText.__returning__].model_validate({"ok": True, "result": True})
print(json.dumps({
    "pinned": pinned,
    "complete": [Message.__pydantic_complete__, Update.__pydantic_complete__],
    "methods_built": [SendMessage.__pydantic_complete__, GetUpdates.__pydantic_complete__],
    "unused_method_built": SetMyCommands.__pydantic_complete__,
    "reply_to": updates[0].message.reply_to_message.text,
    "edited": edited.result,
}))
"""


def test_pinned_responses_build_the_models_they_carry_once() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PIN_PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["pinned"] == 10
    # Complete models are reused by each Response[...] instead of built again inside it.
    assert seen["complete"] == [True, True]
    # The channel's methods are built ahead (in the home's process, before it forks); the
    # rest wait for a first use.
    assert seen["methods_built"] == [True, True]
    assert seen["unused_method_built"] is False
    assert (seen["reply_to"], seen["edited"]) == ("first", True)


def test_a_module_keeps_its_own_names_and_gains_the_missing_ones() -> None:
    from atlas.channels.telegram.aiogram_import import add_missing_names

    own = object()
    names = {"Message": own, "__name__": "aiogram.types.message"}
    add_missing_names(names, {"Message": object(), "Chat": "chat", "User": "user"})
    assert names == {
        "Message": own,
        "__name__": "aiogram.types.message",
        "Chat": "chat",
        "User": "user",
    }
