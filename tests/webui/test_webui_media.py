"""The web board with images: the Chat tab sends an uploaded image with the next message, rendered
by ``ChatEngine`` exactly as ``tunekit chat --image``; the data preview shows a multimodal record's images
(thumbnails), video names and each placeholder's token count; bad uploads are answered in the chat by name.

Driven through the board's own functions (``Board.chat.turn``, ``Board.sample_preview_media``), not a browser.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import REFERENCE_DATA, write_dataset
from tunekit.webui.board import Board
from tunekit.webui.paths import PathPolicy

pytest.importorskip("gradio")

DEMO_DIR = REFERENCE_DATA
SMALL = (
    28 * 28 * 16
)  # image_max_pixels: 1.jpg (300x168) -> grid 1x4x10 -> 10 image tokens (tests/multimodal/test_multimodal.py)
GREEDY = {"max_new_tokens": 6, "do_sample": False}


@pytest.fixture(scope="module")
def demo_dir() -> Path:
    if not (DEMO_DIR / "mllm_demo.json").is_file():
        pytest.skip(f"reference data not found at {DEMO_DIR}")
    return DEMO_DIR


@pytest.fixture(scope="module")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl") / "model", like="qwen2-vl", seed=0)


def _board(root: Path, *allow: Path, **kw) -> Board:
    return Board(cwd=root, policy=PathPolicy(root, caches=[], allow=list(allow)), **kw)


def _load(board: Board, model: Path, template: str) -> None:
    check = board.validate({"model_name_or_path": str(model), "template": template, "image_max_pixels": SMALL})
    assert check.ok, check.message
    board.chat.load(check.config)


@pytest.fixture(scope="module")
def vlm_board(tmp_path_factory, tiny_qwen2_vl, demo_dir) -> Board:
    root = tmp_path_factory.mktemp("ws")
    board = _board(root, tiny_qwen2_vl, demo_dir)
    _load(board, tiny_qwen2_vl, "qwen2_vl")
    return board


def _last_turn(turns) -> dict:
    *_, convo = turns
    return convo


# ------------------------------------------------------------------ chat
def test_an_uploaded_image_goes_with_the_next_message_as_in_chat_engine(vlm_board, demo_dir):
    from tunekit.infer.engine import ChatEngine

    image = demo_dir / "mllm_demo_data" / "1.jpg"
    steps = list(vlm_board.chat.turn(None, "Who is this?", str(image), lang="en", **GREEDY))
    convo = steps[-1]
    copy = Path(convo["images"][0])
    assert copy.parent == vlm_board.served_dir and copy.read_bytes() == image.read_bytes()  # Gradio may serve it
    reply = convo["shown"][-1]["content"]
    assert convo["shown"] == [
        {"role": "user", "content": {"path": str(copy)}},
        {"role": "user", "content": "Who is this?"},
        {"role": "assistant", "content": reply},
    ]
    assert convo["messages"] == [
        {"role": "user", "content": "<image>Who is this?"},
        {"role": "assistant", "content": reply},
    ]
    # the same engine as `tunekit chat --image`, loaded on its own: the same greedy reply for the same image
    engine = ChatEngine(vlm_board.chat.engine.cfg)
    (want,) = engine.chat([{"role": "user", "content": "Who is this?"}], images=[str(image)], **GREEDY)
    assert reply == want.text and want.completion_tokens > 0
    # the next message (no new image) keeps the image in the conversation, as the chat REPL does
    convo = _last_turn(vlm_board.chat.turn(convo, "And now?", None, lang="en", **GREEDY))
    history = [
        {"role": "user", "content": "<image>Who is this?"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "And now?"},
    ]
    (second,) = engine.chat(history, images=[str(image)], **GREEDY)
    assert convo["shown"][-1] == {"role": "assistant", "content": second.text}
    assert convo["messages"] == history + [{"role": "assistant", "content": second.text}]
    assert convo["images"] == [str(copy)]


def test_bad_uploads_are_named_in_the_chat_and_leave_the_conversation(vlm_board, demo_dir, tmp_path, tiny_qwen):
    from tunekit.webui.chat import ChatSession

    bad = tmp_path / "cat.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not really a picture")
    convo = _last_turn(vlm_board.chat.turn(None, "What is it?", str(bad), lang="en", **GREEDY))
    assert convo == {
        "messages": [],
        "images": [],
        "shown": [
            {"role": "user", "content": "What is it?"},
            {
                "role": "assistant",
                "content": "⚠ cat.png cannot be read as an image (the file is corrupt or not an image): "
                "upload a PNG, JPEG or WebP file.",
            },
        ],
    }
    zh = _last_turn(vlm_board.chat.turn(None, "这是什么？", str(bad), lang="zh", **GREEDY))
    assert (
        zh["shown"][-1]["content"]
        == "⚠ cat.png 无法作为图像读取（文件已损坏或不是图像）：请上传 PNG、JPEG 或 WebP 文件。"
    )
    # over the upload limit (a board started with a 10 kB limit; 1.jpg is 12324 bytes)
    small = ChatSession(max_upload_bytes=10_000)
    small.engine = vlm_board.chat.engine
    image = demo_dir / "mllm_demo_data" / "1.jpg"
    convo = _last_turn(small.turn(convo, "Who?", str(image), lang="en", **GREEDY))
    assert convo["shown"][-1]["content"] == (
        "⚠ 1.jpg is 12.3 kB, over the board's upload limit of 10.0 kB: send a "
        "smaller image (downscale or compress it)."
    )
    assert convo["messages"] == [] and convo["images"] == []
    # no model loaded yet / a text-only model
    fresh = _board(tmp_path, tiny_qwen, demo_dir)
    convo = _last_turn(fresh.chat.turn(None, "Who?", str(image), lang="en"))
    assert convo["shown"][-1]["content"] == "⚠ Load a model first (Load model)."
    _load(fresh, tiny_qwen, "qwen")
    convo = _last_turn(fresh.chat.turn(None, "Who?", str(image), lang="en", **GREEDY))
    assert convo["shown"][-1]["content"] == (
        "⚠ 1.jpg: the loaded model is text-only (template 'qwen') and cannot see images. Load a vision-language model "
        "with its multimodal template (e.g. qwen2_vl for Qwen2-VL / Qwen2.5-VL), or remove the image and send the "
        "text alone."
    )
    assert convo["messages"] == []
    # the same model answers the text alone
    convo = _last_turn(fresh.chat.turn(convo, "Who?", None, lang="en", **GREEDY))
    assert convo["messages"][0] == {"role": "user", "content": "Who?"} and len(convo["shown"]) == 4


def _handler(demo, button, event: str = "click"):
    (fn,) = [f for f in demo.fns.values() if (button._id, event) in f.targets]
    return fn


def test_the_chat_tab_sends_its_upload_with_the_message(vlm_board, demo_dir):
    """The tab's own Send handler (its inputs as Gradio passes them) answers like Board.chat.turn, and the
    Chatbot accepts the history with the image bubble."""
    from tunekit.webui.app import create_app
    from tunekit.webui.chat import MAX_UPLOAD_BYTES

    demo = create_app(vlm_board)
    chat = demo.tk_tabs["chat"]
    assert type(chat.image).__name__ == "File" and chat.image.file_types == ["image"] and chat.image.type == "filepath"
    assert vlm_board.chat.max_upload_bytes == MAX_UPLOAD_BYTES == 20_000_000
    send = _handler(demo, chat.send_btn)
    assert _handler(demo, chat.message, "submit").fn is send.fn
    image = str(demo_dir / "mllm_demo_data" / "1.jpg")
    data = {c: getattr(c, "value", None) for c in send.inputs}
    max_new = chat.form["max_new_tokens"]
    data.update(
        {
            chat.message: "Who is this?",
            chat.image: image,
            chat.conversation: None,
            chat.system: "",
            max_new: 6,
            chat.form["do_sample"]: False,
        }
    )
    *_, out = send.fn(data)
    want = _last_turn(vlm_board.chat.turn(None, "Who is this?", image, lang="en", **GREEDY))
    assert out == {chat.chatbot: want["shown"], chat.conversation: want, chat.message: "", chat.image: None}
    shown = chat.chatbot.postprocess(out[chat.chatbot]).model_dump()
    assert [m["role"] for m in shown] == ["user", "user", "assistant"]
    assert shown[0]["content"][0]["file"]["path"] == want["images"][0] and shown[0]["content"][0]["type"] == "file"
    cleared = _handler(demo, chat.clear_btn).fn()
    assert cleared == ([], {"messages": [], "images": [], "shown": []})


# ------------------------------------------------------------------ data preview
def _image_tokens(model: Path, image: Path) -> int:
    """Tokens of one image by the model's own image processor: grid t*h*w / merge_size**2 (Qwen2VLProcessor's rule)."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    proc = Qwen2VLImageProcessorPil.from_pretrained(model)
    grid = proc(
        images=[Image.open(image).convert("RGB")],
        size={"shortest_edge": 32 * 32, "longest_edge": SMALL},
        return_tensors="pt",
    )["image_grid_thw"][0]
    return int(grid.prod()) // proc.merge_size**2


def test_the_preview_of_mllm_demo_shows_its_images_and_placeholder_counts(vlm_board, tiny_qwen2_vl, demo_dir):
    from PIL import Image
    from transformers import AutoTokenizer

    form = {
        "model_name_or_path": str(tiny_qwen2_vl),
        "template": "qwen2_vl",
        "dataset": "mllm_demo",
        "dataset_dir": str(demo_dir),
        "image_max_pixels": str(SMALL),
        "cutoff_len": "1024",
    }
    check, pieces, samples, note = vlm_board.sample_preview_media(form, 2)
    assert check.ok and note == ""
    # the data layer lists media by resolved path (mm_plugins.resolve_media), as training reads them and the
    # board's path policy checks them: the same whether the data folder is given through a symbolic link or not
    one, two = (demo_dir / "mllm_demo_data" / "1.jpg").resolve(), (demo_dir / "mllm_demo_data" / "2.jpg").resolve()
    records = json.loads((demo_dir / "mllm_demo.json").read_text(encoding="utf-8"))
    assert records[0]["images"] == ["mllm_demo_data/1.jpg", "mllm_demo_data/1.jpg"]
    assert samples[0].images == [str(one), str(one)] and samples[1].images == [str(two)]
    n1, n2 = _image_tokens(tiny_qwen2_vl, one), _image_tokens(tiny_qwen2_vl, two)
    assert n1 == 10
    assert samples[0].media_tokens == [("<image>", 10), ("<image>", 10)] and samples[1].media_tokens == [
        ("<image>", n2)
    ]
    # the board's pieces: each run of <|image_pad|> is one "media" piece, between the vision markers
    first = pieces[: [p[0] for p in pieces].index("\n\n────────\n\n")]
    assert [p for p in first if p[1] == "media"] == [("<image> × 10 tokens", "media")] * 2
    text = "".join(t for t, _ in first)
    assert text.count("<|vision_start|><image> × 10 tokens<|vision_end|>") == 2
    # collapsing lost nothing: re-expanded, the text is the training ids decoded
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    tok = load_tokenizer(check.config)
    row = prepare_datasets(check.config, tok, "sft").train[0]
    assert text.replace("<image> × 10 tokens", "<|image_pad|>" * 10) == AutoTokenizer.from_pretrained(
        tiny_qwen2_vl
    ).decode(row["input_ids"])
    # thumbnails (copies in the served folder) and the media list with the counts
    thumbs, media = vlm_board.sample_media(samples, "en")
    assert [caption for _, caption in thumbs] == ["#1 · 1: 1.jpg", "#1 · 2: 1.jpg", "#2 · 1: 2.jpg"]
    for file, _ in thumbs:
        assert Path(file).parent == vlm_board.served_dir
    with Image.open(thumbs[0][0]) as small, Image.open(one) as full:
        assert small.size == (192, round(192 * full.size[1] / full.size[0]))  # longer side 192, aspect kept
    assert media == (
        "- **#1** images: `mllm_demo_data/1.jpg`, `mllm_demo_data/1.jpg` · media tokens: "
        "`<image> × 10`, `<image> × 10`\n"
        f"- **#2** images: `mllm_demo_data/2.jpg` · media tokens: `<image> × {n2}`"
    )
    assert vlm_board.sample_media(samples, "zh")[1].startswith("- **#1** 图像: `mllm_demo_data/1.jpg`")


def test_the_preview_through_a_symlinked_data_folder_is_the_same(vlm_board, tiny_qwen2_vl, demo_dir, tmp_path):
    """A data folder given through a symbolic link (as ``../shared`` may be) previews exactly as the folder itself:
    the same resolved media paths, media list and thumbnails (the board's path policy resolves links)."""
    link = tmp_path / "linked-data"
    link.symlink_to(demo_dir.resolve(), target_is_directory=True)
    results = []
    for folder in (demo_dir, link):
        form = {
            "model_name_or_path": str(tiny_qwen2_vl),
            "template": "qwen2_vl",
            "dataset": "mllm_demo",
            "dataset_dir": str(folder),
            "image_max_pixels": str(SMALL),
            "cutoff_len": "1024",
        }
        check, pieces, samples, note = vlm_board.sample_preview_media(form, 1)
        assert check.ok and note == "", note
        results.append((pieces, [s.images for s in samples], vlm_board.sample_media(samples, "en")))
    (pieces, images, (thumbs, media)), through_link = results
    assert through_link == results[0]
    assert images == [[str((demo_dir / "mllm_demo_data" / "1.jpg").resolve())] * 2]
    assert [caption for _, caption in thumbs] == ["#1 · 1: 1.jpg", "#1 · 2: 1.jpg"]
    assert (
        media
        == "- **#1** images: `mllm_demo_data/1.jpg`, `mllm_demo_data/1.jpg` · media tokens: `<image> × 10`, `<image> "
        "× 10`"
    )


def test_media_outside_the_allowed_folders_are_refused_and_never_served(tiny_qwen2_vl, demo_dir, tmp_path):
    """A record may name any path: the board's preview (like its jobs) refuses one outside its folders, naming the
    record, and never reads or copies the file."""
    root = tmp_path / "ws"
    data = root / "data"
    data.mkdir(parents=True)
    outside = tmp_path / "private"
    outside.mkdir()
    shutil.copyfile(demo_dir / "mllm_demo_data" / "1.jpg", outside / "secret.jpg")
    records = [
        {
            "messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "A player."}],
            "images": [str(outside / "secret.jpg")],
        }
    ]
    write_dataset(
        data,
        "toy",
        records,
        {
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
        },
    )
    board = _board(root, tiny_qwen2_vl)
    form = {
        "model_name_or_path": str(tiny_qwen2_vl),
        "template": "qwen2_vl",
        "dataset": "toy",
        "dataset_dir": str(data),
        "image_max_pixels": str(SMALL),
        "cutoff_len": "1024",
    }
    check, _pieces, samples, note = board.sample_preview_media(form, 1)
    assert check.ok and samples == []
    assert (
        note.startswith(f"⚠ {data / 'toy.json'}, record 0: images[0] '")
        and "is outside the folders this job may read" in note
    )
    assert not list(board.served_dir.iterdir())


def test_the_preview_of_a_video_record_names_the_video_and_its_tokens(vlm_board, tiny_qwen2_vl, demo_dir):
    pytest.importorskip("av")
    form = {
        "model_name_or_path": str(tiny_qwen2_vl),
        "template": "qwen2_vl",
        "dataset": "mllm_video_demo",
        "dataset_dir": str(demo_dir),
        "video_max_pixels": str(64 * 64),
        "video_maxlen": "4",
        "cutoff_len": "1024",
    }
    check, pieces, samples, note = vlm_board.sample_preview_media(form, 1)
    assert check.ok and note == "", note
    (sample,) = samples
    assert sample.videos == [str((demo_dir / "mllm_demo_data" / "1.mp4").resolve())] and sample.images == []
    ((kind, count),) = sample.media_tokens
    assert kind == "<video>" and count > 0
    assert (f"<video> × {count} tokens", "media") in pieces
    thumbs, media = vlm_board.sample_media(samples, "en")
    assert thumbs == [] and media == f"- **#1** videos: `mllm_demo_data/1.mp4` · media tokens: `<video> × {count}`"


def test_the_upload_limit_is_a_webui_flag(tmp_path):
    from tunekit.cli.webui_cmd import build_parser, main
    from tunekit.errors import ConfigError

    assert build_parser().parse_args([]).max_upload_mb == 20.0
    assert build_parser().parse_args(["--max-upload-mb", "2.5"]).max_upload_mb == 2.5
    with pytest.raises(ConfigError) as err:
        main(["--max-upload-mb", "0", "--workspace", str(tmp_path)])
    assert str(err.value) == "--max-upload-mb must be above 0 (MB), got 0.0: e.g. --max-upload-mb 20."
