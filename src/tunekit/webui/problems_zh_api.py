"""The API server's media refusals in Chinese: one template per key of
:data:`tunekit.config.problem_texts_api.ENGLISH_API`, the same placeholders and format specs
(``tests/webui/test_problems_zh.py`` holds every key to one); option names, values, paths and code stay as they are."""

from __future__ import annotations

ZH_API: dict[str, str] = {
    "api_media_dir_not_folder": "api_media_dir '{folder}' 不是文件夹：请创建它，或取消设置 api_media_dir（此时请求"
    "只能以 base64 `data:` URL 内联发送媒体）。",
    "api_media_too_large": "{where}：该{item}解码后为 {size:.1f} MB，超过本服务器的上限 {limit:g} MB（选项 "
    "api_max_media_mb）：请发送更小的{item}。",
    "api_media_bad_base64": "{where}：该{item}的数据不是有效的 base64。",
    "api_media_empty": "{where}：该{item}的数据为空。",
    "api_media_data_url_base64": "{where}：`data:` URL 必须是 base64 编码：`data:{mime}/<type>;base64,<data>`。",
    "api_media_data_url_type": "{where}：该部分携带的是{item}，但其 `data:` URL 的类型是 '{got}'：请发送 "
    "`data:{mime}/<type>;base64,<data>`。",
    "api_media_no_files": "{where}：拒绝读取本地文件：除非选项 api_media_dir 指定了客户端可读取的文件夹，否则本服务器"
    "不读取任何文件。请以 `data:` URL（base64）内联发送该{item}，或用 `api_media_dir=FOLDER` 启动服务器。",
    "api_media_outside": "{where}：'{path}' 不在本服务器读取文件的文件夹内（选项 api_media_dir；先解析符号链接和 "
    "`..`）：请指定该文件夹下的文件。",
    "api_media_not_file": "{where}：'{path}' 不是 api_media_dir 下的文件。",
    "api_media_file_host": "{where}：主机为 '{host}' 的 `file:` URL：只读取本地文件（`file:///path`）。",
    "api_media_no_url": "{where}：{part} 部分没有 `{part}.url`：请发送 `data:` URL（base64）或文件路径。",
    "api_media_audio_data": "{where}：input_audio 部分需要 input_audio.data（base64 音频）。",
    "api_media_remote": "{where}：拒绝 {scheme} URL：`tunekit api` 不从网络获取任何内容。请以 `data:` URL（base64）"
    "内联发送该{item}，或作为 api_media_dir 下的文件发送。",
    "api_media_scheme": "{where}：不读取协议为 '{scheme}' 的 URL：请发送 `data:` URL（base64）或 api_media_dir 下的"
    "文件路径。",
    "api_image_undecodable": "{where}：无法解码该图片（{error}: {reason}）：文件已损坏或不是图片；请发送 PNG、JPEG、"
    "WebP、GIF 或 BMP 图片。",
    "api_media_needs_av": "{where}：读取{item}需要服务器安装 PyAV（`pip install av`）。",
    "api_media_undecodable": "{where}：无法解码该{item}（{error}: {reason}）：文件已损坏或不是{item}文件。",
}
