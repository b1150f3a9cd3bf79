// The whole public API of reprise.
#ifndef REPRISE_INCLUDE_REPRISE_REPRISE_H_
#define REPRISE_INCLUDE_REPRISE_REPRISE_H_

#include "reprise/bucketed_trainer.h"
#include "reprise/data.h"
#include "reprise/data_parallel.h"
#include "reprise/forward_runner.h"
#include "reprise/graph.h"
#include "reprise/local_data_parallel.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "reprise/status_macros.h"
#include "reprise/tensor.h"
#include "reprise/trainer.h"

#endif  // REPRISE_INCLUDE_REPRISE_REPRISE_H_
