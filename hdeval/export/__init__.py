"""The evaluator bundle: exporting a fitted aggregator to ONNX with its criteria and card, and
scoring texts with it in production (onnxruntime and the judge only)."""
