"""The model set of benches/models: real architectures built in code with random weights (torch,
torchvision, timm, transformers; nothing is downloaded from a model hub), batch 1, and the venv
they run in. Imported by export.py and bench.py; not run on its own.

Each entry: name -> (builder, exporters). A builder returns (module, {input name: tensor}); the
exporters are "ts" (torch.onnx.export(dynamo=False), opset TS_OPSET) and/or "dynamo"
(torch.onnx.export(dynamo=True), opset DYNAMO_OPSET). A model exported both ways appears twice
in the table, as NAME and NAME@dynamo.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.join(HERE, ".venv")
OUT = os.path.join(HERE, "out")
PACKAGES = ["torch", "torchvision", "timm", "transformers", "onnx", "onnxruntime", "onnxscript", "numpy"]
TS_OPSET = 17
DYNAMO_OPSET = 18


def ensure_venv():
    """Re-run this script in benches/models/.venv, creating it on first use: torch's CPU wheels
    from download.pytorch.org where that host answers, else plain PyPI."""
    if os.environ.get("GRAPHC_MODELS_IN_VENV"):
        return
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        cpu = subprocess.run([py, "-m", "pip", "install", "-q", "--retries", "0", "--timeout", "15", "--index-url",
                              "https://download.pytorch.org/whl/cpu", "torch", "torchvision"])
        if cpu.returncode != 0:
            print("download.pytorch.org not reachable: torch from PyPI", file=sys.stderr)
        subprocess.run([py, "-m", "pip", "install", "-q"] + PACKAGES, check=True)
    env = dict(os.environ, GRAPHC_MODELS_IN_VENV="1")
    sys.exit(subprocess.run([py] + sys.argv, env=env).returncode)


# --- builders ---------------------------------------------------------------------------------
# Imports stay inside the builders: the venv bootstrap runs before torch exists.

SEQ = 32


def _ids(vocab, seq=SEQ):
    import torch
    return torch.randint(0, vocab, (1, seq), dtype=torch.int64)


def _mask(seq=SEQ):
    """An all-ones attention mask. The decoders take one: without it transformers derives packed
    sequences from position ids with aten::diff, which the TorchScript exporter cannot export."""
    import torch
    return torch.ones((1, seq), dtype=torch.int64)


class _First:
    """Wrap a transformers model so the ONNX graph has one tensor output (hidden state/logits)."""

    @staticmethod
    def wrap(model, *names):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                out = self.m(**dict(zip(names, args)), return_dict=False)
                return out[0]

        return W()


def _tv(name, shape, **kw):
    def build():
        import torch
        import torchvision
        m = getattr(torchvision.models, name)(weights=None, **kw)
        return m, {"input": torch.randn(*shape)}
    build.__doc__ = f"torchvision {name}, input {list(shape)}."
    return build


def _tv_video(name, shape):
    def build():
        import torch
        import torchvision
        m = getattr(torchvision.models.video, name)(weights=None)
        return m, {"input": torch.randn(*shape)}
    build.__doc__ = f"torchvision.models.video {name}, clip {list(shape)}."
    return build


def _timm(name, shape):
    def build():
        import timm
        import torch
        m = timm.create_model(name, pretrained=False)
        return m, {"input": torch.randn(*shape)}
    build.__doc__ = f"timm {name}, input {list(shape)}."
    return build


def conv1d_audio():
    """An M5-style raw-audio classifier: Conv1d/BatchNorm/ReLU/MaxPool stack, 1 s at 16 kHz."""
    import torch
    from torch import nn

    def blk(i, o, k, s=1):
        return [nn.Conv1d(i, o, k, stride=s, padding=k // 2), nn.BatchNorm1d(o), nn.ReLU(), nn.MaxPool1d(4)]

    m = nn.Sequential(*blk(1, 64, 80, 4), *blk(64, 64, 3), *blk(64, 128, 3), *blk(128, 256, 3),
                      nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(256, 35))
    return m, {"input": torch.randn(1, 1, 16000)}


def whisper_encoder():
    """Whisper-tiny-sized encoder (4 layers, d_model 384, 6 heads, 80 mel bins), 5 s of audio
    (max_source_positions 250: 500 mel frames): two Conv1d then the transformer."""
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    cfg = WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                        decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536,
                        num_mel_bins=80, max_source_positions=250, vocab_size=1000)
    enc = WhisperEncoder(cfg).eval()
    return _First.wrap(enc, "input_features"), {"input_features": torch.randn(1, 80, 500)}


def wav2vec2():
    """A small wav2vec2 (the 7-layer conv feature extractor at width 128, 2 transformer layers,
    hidden 128), 1 s at 16 kHz."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    cfg = Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                         conv_dim=(128,) * 7, num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=4,
                         do_stable_layer_norm=True, feat_extract_norm="layer")
    m = Wav2Vec2Model(cfg).eval()
    return _First.wrap(m, "input_values"), {"input_values": torch.randn(1, 16000)}


def conv3d_small():
    """A small 3-D conv net (C3D-like, 4 stages with BatchNorm), clip [1,3,8,56,56]."""
    import torch
    from torch import nn

    def blk(i, o, pool):
        return [nn.Conv3d(i, o, 3, padding=1), nn.BatchNorm3d(o), nn.ReLU(), nn.MaxPool3d(pool)]

    m = nn.Sequential(*blk(3, 32, (1, 2, 2)), *blk(32, 64, 2), *blk(64, 128, 2), *blk(128, 128, 2),
                      nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(128, 10))
    return m, {"input": torch.randn(1, 3, 8, 56, 56)}


def unet():
    """A small U-Net (3 levels, widths 32-64-128-256, ConvTranspose2d upsampling, skip
    concatenations), [1,3,128,128] -> 2-class mask."""
    import torch
    from torch import nn

    def dbl(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, w=(32, 64, 128, 256)):
            super().__init__()
            self.downs = nn.ModuleList([dbl(3, w[0])] + [dbl(a, b) for a, b in zip(w, w[1:])])
            self.ups = nn.ModuleList([nn.ConvTranspose2d(b, a, 2, stride=2) for a, b in zip(w, w[1:])][::-1])
            self.dec = nn.ModuleList([dbl(2 * a, a) for a in w[:-1]][::-1])
            self.head = nn.Conv2d(w[0], 2, 1)
            self.pool = nn.MaxPool2d(2)

        def forward(self, x):
            skips = []
            for i, d in enumerate(self.downs):
                x = d(x)
                if i < len(self.downs) - 1:
                    skips.append(x)
                    x = self.pool(x)
            for up, dec, s in zip(self.ups, self.dec, reversed(skips)):
                x = dec(torch.cat([up(x), s], 1))
            return self.head(x)

    return UNet(), {"input": torch.randn(1, 3, 128, 128)}


def _rnn(kind, bidirectional=False):
    def build():
        import torch
        from torch import nn

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = getattr(nn, kind)(64, 128, num_layers=2, batch_first=True, bidirectional=bidirectional)
                self.fc = nn.Linear(128 * (2 if bidirectional else 1), 10)

            def forward(self, x):
                y, _ = self.rnn(x)
                return self.fc(y)

        return M(), {"input": torch.randn(1, 50, 64)}
    bi = ", bidirectional" if bidirectional else ""
    build.__doc__ = f"nn.{kind}(64 -> 128, 2 layers{bi}) over 50 steps, then Linear."
    return build


def bert():
    """BERT, tiny config (2 layers, hidden 128, 2 heads, FFN 512), seq 32."""
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512)
    return _First.wrap(BertModel(cfg).eval(), "input_ids"), {"input_ids": _ids(30522)}


def roberta():
    """RoBERTa, small config (4 layers, hidden 256, 4 heads, FFN 1024), seq 32."""
    from transformers import RobertaConfig, RobertaModel
    cfg = RobertaConfig(vocab_size=50265, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024)
    return _First.wrap(RobertaModel(cfg).eval(), "input_ids"), {"input_ids": _ids(50265)}


def gpt2():
    """GPT-2, small config (4 layers, n_embd 256, 4 heads), LM head, seq 32 with an attention mask,
    no KV cache."""
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=8000, n_embd=256, n_layer=4, n_head=4, n_positions=128, use_cache=False)
    m = GPT2LMHeadModel(cfg).eval()
    return _First.wrap(m, "input_ids", "attention_mask"), {"input_ids": _ids(8000), "attention_mask": _mask()}


def llama():
    """Llama, tiny config (4 layers, hidden 256, 4 heads, 2 KV heads, SwiGLU 688, RoPE,
    RMSNorm), LM head, seq 32 with an attention mask, no KV cache."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=8000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, use_cache=False)
    m = LlamaForCausalLM(cfg).eval()
    return _First.wrap(m, "input_ids", "attention_mask"), {"input_ids": _ids(8000), "attention_mask": _mask()}


def t5_encoder():
    """T5 encoder, small config (4 layers, d_model 256, 4 heads, FFN 1024, relative position
    buckets), seq 32."""
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(vocab_size=8000, d_model=256, d_kv=64, d_ff=1024, num_layers=4, num_heads=4)
    return _First.wrap(T5EncoderModel(cfg).eval(), "input_ids"), {"input_ids": _ids(8000)}


def t5():
    """Full T5 (encoder + decoder, 2+2 layers, d_model 256), LM head, source 32, target 16."""
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(vocab_size=8000, d_model=256, d_kv=64, d_ff=1024, num_layers=2, num_decoder_layers=2,
                   num_heads=4, use_cache=False)
    m = T5ForConditionalGeneration(cfg).eval()
    return (_First.wrap(m, "input_ids", "decoder_input_ids"),
            {"input_ids": _ids(8000), "decoder_input_ids": _ids(8000, 16)})


def bart():
    """BART (2+2 layers, d_model 256, 4 heads, FFN 1024), seq-to-seq hidden state, source 32,
    target 16."""
    from transformers import BartConfig, BartModel
    cfg = BartConfig(vocab_size=8000, d_model=256, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024,
                     max_position_embeddings=128, use_cache=False)
    m = BartModel(cfg).eval()
    return (_First.wrap(m, "input_ids", "decoder_input_ids"),
            {"input_ids": _ids(8000), "decoder_input_ids": _ids(8000, 16)})


def vit():
    """timm vit_tiny_patch16_224 at 224 (12 layers, dim 192, 3 heads)."""
    return _timm("vit_tiny_patch16_224", (1, 3, 224, 224))()


MODELS = {
    # 1-D conv audio
    "conv1d_audio": (conv1d_audio, ["ts"]),
    "whisper_encoder": (whisper_encoder, ["ts", "dynamo"]),
    "wav2vec2": (wav2vec2, ["ts"]),
    # 3-D conv
    "conv3d_small": (conv3d_small, ["ts"]),
    "r3d_18": (_tv_video("r3d_18", (1, 3, 8, 56, 56)), ["ts"]),
    # transposed conv
    "unet": (unet, ["ts", "dynamo"]),
    # recurrent
    "lstm": (_rnn("LSTM"), ["ts", "dynamo"]),
    "gru": (_rnn("GRU"), ["ts"]),
    "bilstm": (_rnn("LSTM", bidirectional=True), ["ts"]),
    # transformers
    "bert": (bert, ["ts", "dynamo"]),
    "roberta": (roberta, ["ts"]),
    "gpt2": (gpt2, ["ts", "dynamo"]),
    "llama": (llama, ["ts", "dynamo"]),
    "t5_encoder": (t5_encoder, ["ts"]),
    "t5": (t5, ["ts"]),
    "bart": (bart, ["ts"]),
    "vit_tiny": (vit, ["ts"]),
    # 2-D CNNs
    "resnet18": (_tv("resnet18", (1, 3, 224, 224)), ["ts", "dynamo"]),
    "mobilenet_v2": (_tv("mobilenet_v2", (1, 3, 224, 224)), ["ts", "dynamo"]),
    "mobilenet_v3_small": (_tv("mobilenet_v3_small", (1, 3, 224, 224)), ["ts"]),
    "efficientnet_b0": (_tv("efficientnet_b0", (1, 3, 224, 224)), ["ts", "dynamo"]),
    "convnext_tiny": (_tv("convnext_tiny", (1, 3, 128, 128)), ["ts"]),
    "regnet_y_400mf": (_tv("regnet_y_400mf", (1, 3, 224, 224)), ["ts"]),
    "googlenet": (_tv("googlenet", (1, 3, 224, 224), aux_logits=False, init_weights=True), ["ts"]),
    "shufflenet_v2": (_tv("shufflenet_v2_x1_0", (1, 3, 224, 224)), ["ts"]),
    "squeezenet1_1": (_tv("squeezenet1_1", (1, 3, 224, 224)), ["ts"]),
    "densenet121": (_tv("densenet121", (1, 3, 160, 160)), ["ts"]),
    "mobilevit_xxs": (_timm("mobilevit_xxs", (1, 3, 256, 256)), ["ts"]),
}


def entries(only=""):
    """[(entry name, model name, exporter)], in MODELS order; --only matches either name."""
    want = [o for o in only.split(",") if o]
    out = []
    for name, (_, exporters) in MODELS.items():
        for ex in exporters:
            entry = name if ex == "ts" else f"{name}@{ex}"
            if not want or entry in want or name in want:
                out.append((entry, name, ex))
    return out


def paths(entry):
    """The cached model file and its inputs (an .npz of the random inputs, by ONNX input name)."""
    base = os.path.join(OUT, entry.replace("@", "."))
    return base + ".onnx", base + ".inputs.npz"
