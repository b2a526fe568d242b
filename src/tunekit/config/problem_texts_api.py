"""The English templates of the API server's media refusals (``serve/media.py``: a request's image, video and audio
parts; ``tunekit api``): key → template, part of :data:`tunekit.config.problem_texts.ENGLISH`. Only the API says
them (in English, as written here: the board's chat checks its uploads itself, ``webui/chat.py``); their Chinese is in
``webui/problems_zh_api.py`` for one keyed mechanism. ``{item}`` is a ``part_item_`` key (image, video, audio).
"""

from __future__ import annotations

ENGLISH_API: dict[str, str] = {
    "api_media_dir_not_folder": "api_media_dir '{folder}' is not a folder: create it, or unset api_media_dir "
    "(then requests send media inline as base64 data: URLs only).",
    "api_media_too_large": "{where}: the {item} is {size:.1f} MB decoded, larger than this server's limit of "
    "{limit:g} MB (option api_max_media_mb): send a smaller {item}.",
    "api_media_bad_base64": "{where}: the {item} data is not valid base64.",
    "api_media_empty": "{where}: the {item} data is empty.",
    "api_media_data_url_base64": "{where}: a data URL must be base64: data:{mime}/<type>;base64,<data>.",
    "api_media_data_url_type": "{where}: this part carries an {item}, but its data URL is of type '{got}': "
    "send data:{mime}/<type>;base64,<data>.",
    "api_media_no_files": "{where}: local files are refused: this server reads no file unless the option "
    "api_media_dir names the folder clients may read from. Send the {item} inline as a data: URL (base64), or start "
    "the server with api_media_dir=FOLDER.",
    "api_media_outside": "{where}: '{path}' is outside the folder this server reads files from (option "
    "api_media_dir; symlinks and .. are resolved first): name a file under that folder.",
    "api_media_not_file": "{where}: '{path}' is not a file under api_media_dir.",
    "api_media_file_host": "{where}: file URL of host '{host}': only local files (file:///path) are read.",
    "api_media_no_url": "{where}: the {part} part has no {part}.url: send a data: URL (base64) or a file path.",
    "api_media_audio_data": "{where}: an input_audio part needs input_audio.data (base64 audio).",
    "api_media_remote": "{where}: {scheme} URLs are refused: tunekit api fetches nothing from the network. Send "
    "the {item} inline as a data: URL (base64), or as a file under api_media_dir.",
    "api_media_scheme": "{where}: URLs of scheme '{scheme}' are not read: send a data: URL (base64) or a file path "
    "under api_media_dir.",
    "api_image_undecodable": "{where}: the image cannot be decoded ({error}: {reason}): it is corrupt or not an "
    "image; send a PNG, JPEG, WebP, GIF or BMP image.",
    "api_media_needs_av": "{where}: reading {item}s needs PyAV on the server (pip install av).",
    "api_media_undecodable": "{where}: the {item} cannot be decoded ({error}: {reason}): it is corrupt or not a "
    "{item} file.",
}
