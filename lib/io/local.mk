# SPDX-License-Identifier: MIT
# lib/io/ — training data (text, token files, synthetic shapes), safetensors files and Hugging Face GPT-2 and Llama
# configs and exports.
libstrata_la_SOURCES += \
	%reldir%/data.c \
	%reldir%/checkpoint.c \
	%reldir%/hf.c \
	%reldir%/hf-llama.c \
	%reldir%/hf.h

stratainclude_HEADERS += include/strata/data.h include/strata/checkpoint.h include/strata/hf.h
