/* SPDX-License-Identifier: MIT */
/* strata/data.h — training data: byte-level text with a train/validation split, and a synthetic image task. */
#ifndef STRATA_DATA_H
#define STRATA_DATA_H

#include <strata/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_dataset *strata_dataset_t;

enum strata_data_kind { STRATA_DATA_TEXT = 1, STRATA_DATA_IMAGES = 2 };
enum strata_split { STRATA_SPLIT_TRAIN = 0, STRATA_SPLIT_VAL = 1 };

/*
** Byte-level text: every byte is a token (vocabulary 256). `path` NULL
** means the default corpus, built from text the machine ships with
** (every regular file of /usr/share/common-licenses, in name order;
** symbolic links are skipped so no licence counts twice), or
** STRATA_ERR_NOT_FOUND when there is none. The last `val_fraction` of the
** bytes (0 < f < 1, e.g. 0.1; rounded to the nearest byte) is the
** validation split. A missing or unreadable file is STRATA_ERR_IO; an empty
** one, or one leaving fewer than 2 bytes in either split, STRATA_ERR_INVALID;
** the messages name the file.
*/
STRATA_API int strata_dataset_text(const char *path, double val_fraction, strata_dataset_t *out /* OUT */);

/* Formats of a token file for strata_dataset_tokens. */
enum strata_token_format {
  STRATA_TOKENS_AUTO = 0,   /* llm.c when the file starts with its magic, raw uint16 when it holds a NUL byte, else bytes */
  STRATA_TOKENS_BYTES = 1,  /* every byte a token, as strata_dataset_text */
  STRATA_TOKENS_U16 = 2,    /* nanoGPT's train.bin / val.bin: little-endian uint16 token ids, nothing else */
  STRATA_TOKENS_LLMC = 3,   /* llm.c (dev/data/data_common.py): a header of 256 little-endian int32 (magic, version,
                               token count), then the tokens: magic 20240520 version 1 (GPT-2) uint16 tokens, magic
                               20240801 version 7 (Llama 3) uint32 tokens; any other version is refused naming it */
  STRATA_TOKENS_U32 = 4     /* raw little-endian uint32 token ids, nothing else (vocabularies past 65,536: Llama 3's
                               128,256); never chosen by AUTO, whose content cannot tell it from uint16 */
};

/*
** Token ids from a file prepared by nanoGPT or llm.c, for a model with a
** vocabulary of `vocab` (2..1048576) ids; the last `val_fraction` of the
** tokens is the validation split, as for text. The file is checked whole
** before it is used: a byte count that is not a multiple of the token
** size (2 for uint16, 4 for uint32), an llm.c header that is cut short, has
** another magic, or a token count that disagrees with the file's size are
** STRATA_ERR_PARSE; an llm.c version other than the two read (1 with magic
** 20240520, 7 with 20240801) is STRATA_ERR_UNSUPPORTED naming it; a token
** id at or above `vocab` is STRATA_ERR_RANGE naming its position (0-based,
** among the tokens) and its byte offset in the file; the messages name the
** file. BYTES (and AUTO on a file that is neither) is
** strata_dataset_text, whose tokens must lie below `vocab` as well. The
** dataset's info gives vocab = `vocab` and its source says the format, and
** for AUTO's one guess that can be wrong (bytes, since no NUL byte was seen:
** uint16 ids none of whose bytes is 0 look so) why, and that U16 reads the
** file as ids; the info log ("data") says it too.
*/
STRATA_API int strata_dataset_tokens(const char *path, int format, int64_t vocab, double val_fraction,
                                     strata_dataset_t *out /* OUT */);

/*
** The same, with the splits in two files, as nanoGPT prepares them
** (train.bin, val.bin): every token of `train_path` trains, every token of
** `val_path` validates; each file is detected (AUTO) and checked on its
** own. Each must hold at least 2 tokens. With AUTO, one file read as
** bytes and the other as raw uint16 (both told by a NUL byte) is
** STRATA_ERR_PARSE: the content does not tell which is meant, the caller
** must name the format. Text beside an llm.c file (known by its magic) is
** read.
*/
STRATA_API int strata_dataset_tokens_split(const char *train_path, const char *val_path, int format, int64_t vocab,
                                           strata_dataset_t *out /* OUT */);

/* The format a token file would be read as with STRATA_TOKENS_AUTO (looks at its first 64 KiB). */
STRATA_API int strata_token_format_detect(const char *path, int *format /* OUT */);

/*
** A synthetic image task with learnable structure: `count` grayscale
** images of size x size pixels, each showing one of `classes` (2..8)
** shapes (bars, boxes, crosses, diagonals ...) at a random place with
** noise; the label is the shape. Deterministic for a seed; the last 10%
** (count / 10 images) are the validation split, and the labels of each
** split are balanced. Pixels are standardised to about zero mean and unit
** variance. count >= 10, size 8..1024, classes 2..8, else STRATA_ERR_INVALID.
** Up to 64 pixels a side the images are drawn at once and kept; larger
** ones (high-resolution CNNs: 8192 images of 512 x 512 would take 8 GiB)
** are drawn when sampled, the same image for the same index, standardised
** by the statistics of the training split's first 32 images.
*/
STRATA_API int strata_dataset_images(int64_t count, int64_t size, int64_t classes, uint64_t seed,
                                     strata_dataset_t *out /* OUT */);
STRATA_API void strata_dataset_free(strata_dataset_t ds);

struct strata_dataset_info {
  int kind;
  const char *source;        /* file path, "default corpus (...)" or "synthetic shapes": whole, owned by the
                             ** dataset, valid while it lives */
  uint64_t train_size;       /* tokens (text) or images */
  uint64_t val_size;
  int64_t vocab;             /* 256 for text; classes for images */
  int64_t image, channels;   /* images only */
  double unigram_entropy;    /* text: entropy of the training bytes' distribution, nats per byte; 0 for images */
};
STRATA_API int strata_dataset_info(strata_dataset_t ds, struct strata_dataset_info *info /* OUT */);

/*
** Draw a batch. Text: `batch` windows of `context` + 1 bytes at positions
** drawn from *state (a xorshift64* generator state the caller keeps; any
** value, 0 included, is a valid start; the same state gives the same
** batch), uniformly among all starts whose window lies inside the split,
** inputs int32 [batch * context] and targets int32 [batch * context] (the
** next byte); a split shorter than context + 1 bytes is STRATA_ERR_INVALID.
** Images: `context` is ignored, each image is drawn uniformly from the
** split, inputs float [batch * channels * image * image], targets int32
** [batch]. *state advances; saving it in a checkpoint resumes the data
** stream exactly. A refused call leaves *state as it was.
*/
STRATA_API int strata_dataset_sample(strata_dataset_t ds, int split, int64_t batch, int64_t context,
                                     uint64_t *state /* IN/OUT */, void *inputs /* OUT */,
                                     int32_t *targets /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_DATA_H */
