"""Audio files (mp3 / wav / flac ...) decoded with PyAV and resampled to ``audio_sampling_rate``, without torchaudio.

LLaMA-Factory loads audio with torchaudio, averages the channels and resamples; here libswresample (through
PyAV's ``AudioResampler``) resamples each channel to the target rate as 32-bit floats and the channels are
averaged the same way, so a mono 16 kHz file is passed through unchanged.
"""

from __future__ import annotations

from ...config.problems import Said
from ...errors import DataError
from . import require_av


def read_audio(path: str, where: str, sampling_rate: int):
    """The audio at ``path`` as a mono float32 numpy array at ``sampling_rate`` Hz; a corrupt file names file and
    record."""
    import numpy as np

    av = require_av(where, Said("part_av_audio"))
    try:
        with av.open(path) as container:
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="fltp", rate=sampling_rate)
            chunks = [g.to_ndarray() for frame in container.decode(stream) for g in resampler.resample(frame)]
            chunks += [g.to_ndarray() for g in resampler.resample(None)]
    except (av.error.FFmpegError, IndexError, OSError, ValueError) as exc:
        said = Said("media_audio_unreadable", where=where, path=path, type=type(exc).__name__, error=str(exc)[:160])
        raise DataError(said) from None
    if not chunks or sum(c.shape[1] for c in chunks) == 0:
        raise DataError(Said("media_audio_empty", where=where, path=path))
    return np.concatenate(chunks, axis=1).mean(axis=0).astype(np.float32)
