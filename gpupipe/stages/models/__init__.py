"""Model stages: classifiers (fastText, ONNX Runtime)."""
