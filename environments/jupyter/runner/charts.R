# A ggplot's data beside its PNG in the R kernel: the same `application/vnd.cellmate.chart+json`
# entry, in the same shape (E2B's), that runner/charts.py adds beside a matplotlib figure's.
#
# How it rides along: IRkernel draws a printed ggplot on its null device and later sends the
# recorded page (Executor$send_plot). print.ggplot is wrapped to remember each plot with a
# snapshot of the page it drew on; the kernel's send_plot is wrapped to find the plots whose
# snapshot the sent page builds on, read them with ggplot2::ggplot_build(), and add their
# chart to the bundle the original send_plot publishes. Everything is best effort: whatever
# fails leaves the picture exactly as before, without the entry. The runner sources this file
# once when it starts the R kernel (runner/languages.py); it leaves nothing in the user's
# global environment, and ggplot2 is hooked only when something loads it.
#
# Caps and kinds follow runner/charts.py: line (geom_line, geom_path, geom_step,
# geom_smooth), scatter (geom_point), bar (geom_col, geom_bar, geom_histogram), pie (bars in
# coord_polar(theta = "y")), box_and_whisker (geom_boxplot), superchart (facets, one chart per
# panel), unknown (no layer of those kinds). Base graphics stay pictures only.
local({
  chart_mime <- "application/vnd.cellmate.chart+json"
  max_points <- 1000 # points kept per line or scatter (sampled evenly, ends kept)
  max_chart_points <- 10000 # points kept in one chart, all elements together
  max_elements <- 50
  max_axes <- 20
  max_ticks <- 50
  max_text <- 200
  max_pending <- 20 # plots remembered, waiting for their page to be sent

  # ---- values ---------------------------------------------------------------------------

  text <- function(value) {
    if (is.null(value) || is.function(value)) {
      return(NULL)
    }
    if (is.language(value) || is.expression(value)) {
      value <- paste(deparse(value), collapse = " ")
    }
    value <- as.character(value)
    if (!length(value) || is.na(value[[1]])) {
      return(NULL)
    }
    found <- trimws(paste(value, collapse = "\n"))
    if (!nzchar(found)) NULL else substr(found, 1L, max_text)
  }

  unit <- function(label) {
    if (is.null(label)) {
      return(NULL)
    }
    found <- regmatches(label, gregexpr("[(\\[]([^()\\[\\]]+)[)\\]]", label, perl = TRUE))[[1]]
    if (!length(found)) {
      return(NULL)
    }
    last <- trimws(substr(found[[length(found)]], 2L, nchar(found[[length(found)]]) - 1L))
    if (nzchar(last)) last else NULL
  }

  number <- function(value) {
    value <- suppressWarnings(as.numeric(value))
    ifelse(is.finite(value), value, NA)
  }

  sample_indices <- function(count, limit) {
    if (count <= limit) {
      return(seq_len(count))
    }
    if (limit <= 1) {
      return(seq_len(min(limit, 1)))
    }
    step <- (count - 1) / (limit - 1)
    round((seq_len(limit) - 1) * step) + 1
  }

  new_budget <- function() {
    budget <- new.env()
    budget$points <- max_chart_points
    budget$cut <- FALSE
    budget$take <- function(count) {
      kept <- max(min(count, max_points, budget$points), min(count, 2))
      budget$points <- budget$points - kept
      if (kept < count) budget$cut <- TRUE
      kept
    }
    budget
  }

  iso <- function(when) {
    if (inherits(when, "Date")) {
      out <- format(when, "%Y-%m-%dT00:00:00")
    } else {
      zone <- attr(when, "tzone")
      zone <- if (is.null(zone) || !nzchar(zone[[1]])) "UTC" else zone[[1]]
      seconds <- as.numeric(when)
      out <- format(when, "%Y-%m-%dT%H:%M:%S", tz = zone)
      fraction <- round((seconds %% 1) * 1e6)
      out <- ifelse(is.na(fraction) | fraction == 0, out, sprintf("%s.%06d", out, fraction))
      if (!zone %in% c("UTC", "GMT", "Etc/UTC")) {
        offset <- format(when, "%z", tz = zone)
        out <- paste0(out, substr(offset, 1L, 3L), ":", substr(offset, 4L, 5L))
      }
    }
    ifelse(is.na(when), NA, out)
  }

  # ---- scales ---------------------------------------------------------------------------

  transformation <- function(scale) {
    if (is.function(scale$get_transformation)) scale$get_transformation() else scale$trans
  }

  scale_kind <- function(scale) {
    if (is.null(scale)) {
      return("linear")
    }
    if (inherits(scale, "ScaleDiscrete")) {
      return("categorical")
    }
    if (inherits(scale, c("ScaleContinuousDate", "ScaleContinuousDatetime"))) {
      return("datetime")
    }
    name <- transformation(scale)$name
    if (is.null(name) || name == "identity") {
      "linear"
    } else if (startsWith(name, "log")) {
      "log"
    } else {
      name
    }
  }

  # How a position on this scale is given: a category's name, a time as ISO text, else a
  # number in the data's units (a log scale's data is kept as its logarithm).
  reader <- function(scale) {
    kind <- scale_kind(scale)
    if (kind == "categorical") {
      names <- as.character(scale$get_limits())
      return(function(values) {
        if (is.character(values)) {
          return(as.list(values))
        }
        values <- number(values)
        lapply(values, function(value) {
          at <- round(value)
          if (!is.na(at) && at >= 1 && at <= length(names)) names[[at]] else value
        })
      })
    }
    if (is.null(scale)) {
      return(function(values) as.list(number(values)))
    }
    inverse <- transformation(scale)$inverse
    if (kind == "datetime") {
      return(function(values) as.list(iso(inverse(number(values)))))
    }
    function(values) as.list(number(inverse(number(values))))
  }

  # ---- what a layer is --------------------------------------------------------------------

  layer_kind <- function(layer) {
    geom <- layer$geom
    if (inherits(geom, "GeomBoxplot")) {
      "box"
    } else if (inherits(geom, "GeomBar")) {
      "bar"
    } else if (inherits(geom, "GeomPoint")) {
      "scatter"
    } else if (inherits(geom, c("GeomPath", "GeomSmooth"))) {
      "line"
    } else {
      "other"
    }
  }

  # The legend's name for each row: the labels of the discrete colour, fill, shape, ...
  # scales whose values the row has, or "" where no legend tells the rows apart.
  legend_labels <- function(built, data) {
    found <- rep("", nrow(data))
    for (scale in built$plot$scales$scales) {
      if (!inherits(scale, "ScaleDiscrete") || any(scale$aesthetics %in% c("x", "y"))) next
      aesthetic <- intersect(scale$aesthetics, names(data))
      if (!length(aesthetic)) next
      breaks <- scale$get_breaks()
      breaks <- breaks[!is.na(breaks)]
      labels <- vapply(as.list(scale$get_labels(breaks)), function(l) text(l) %||% "", "")
      mapped <- scale$map(breaks)
      at <- match(data[[aesthetic[[1]]]], mapped)
      named <- ifelse(is.na(at), "", labels[at])
      both <- nzchar(found) & nzchar(named) & found != named
      found <- ifelse(both, paste(found, named, sep = ", "), ifelse(nzchar(found), found, named))
    }
    found
  }

  `%||%` <- function(a, b) if (is.null(a)) b else a

  # ---- charts -----------------------------------------------------------------------------

  frame <- function(kind, axes) {
    list(
      type = kind,
      title = axes$title,
      x_label = axes$x_label,
      y_label = axes$y_label,
      x_unit = unit(axes$x_label),
      y_unit = unit(axes$y_label),
      elements = list()
    )
  }

  axes_frame <- function(kind, axes) {
    chart <- frame(kind, axes)
    for (side in c("x", "y")) {
      view <- axes$params[[side]]
      ticks <- list()
      labels <- list()
      if (!is.null(view) && is.function(view$get_breaks)) {
        breaks <- view$get_breaks()
        shown <- as.character(view$get_labels(breaks))
        kept <- which(!is.na(breaks))[seq_len(min(sum(!is.na(breaks)), max_ticks))]
        read <- axes$read[[side]]
        ticks <- if (is.character(breaks)) as.list(breaks[kept]) else read(unclass(breaks)[kept])
        labels <- as.list(ifelse(is.na(shown[kept]), "", shown[kept]))
      }
      chart[[paste0(side, "_scale")]] <- scale_kind(axes$scale[[side]])
      chart[[paste0(side, "_ticks")]] <- ticks
      chart[[paste0(side, "_tick_labels")]] <- labels
    }
    chart
  }

  # A layer's lines (one per group) or scatters (one per legend entry: a discrete x makes
  # groups of points that are one series in the picture).
  point_series <- function(built, data, axes, budget, lines) {
    if (!nrow(data) || !all(c("x", "y") %in% names(data))) {
      return(list())
    }
    labels <- legend_labels(built, data)
    groups <- if ("group" %in% names(data)) data$group else rep(-1L, nrow(data))
    series <- if (lines) groups else match(labels, unique(labels[order(groups)]))
    lapply(split(seq_len(nrow(data)), series), function(rows) {
      count <- length(rows)
      keep <- rows[sample_indices(count, budget$take(count))]
      xs <- axes$read$x(data[[axes$aes$x]][keep])
      ys <- axes$read$y(data[[axes$aes$y]][keep])
      element <- list(label = labels[[rows[[1]]]], points = unname(Map(list, xs, ys)))
      if (length(keep) < count) {
        element$truncated <- TRUE
        element$total_points <- count
      }
      element
    })
  }

  # A bar's place along its category axis, named as runner/charts.py names it.
  place <- function(value, read) {
    found <- read(value)[[1]]
    if (is.character(found)) found else if (is.na(found)) "" else sprintf("%g", found)
  }

  # Bars and boxes are read as vertical ones: the category along x, the value along y.
  upright <- function(data) {
    flipped <- "flipped_aes" %in% names(data) && isTRUE(data$flipped_aes[[1]])
    list(data = if (flipped) ggplot2::flip_data(data, TRUE) else data, flipped = flipped)
  }

  bar_chart <- function(built, layers, axes) {
    chart <- frame("bar", axes)
    bars <- list()
    for (data in layers) {
      if (!nrow(data)) next
      turned <- upright(data)
      rows <- turned$data
      along <- if (turned$flipped) "y" else "x"
      read <- axes$read_aes[[along]]
      linear <- scale_kind(axes$scale_aes[[if (turned$flipped) "x" else "y"]]) == "linear"
      value_read <- axes$read_aes[[if (turned$flipped) "x" else "y"]]
      groups <- legend_labels(built, data)
      ranked <- order(match(groups, unique(groups[order(rows$group)])), rows$x)
      for (i in ranked) {
        if (linear && all(c("ymin", "ymax") %in% names(rows))) {
          value <- number(rows$ymax[[i]] - rows$ymin[[i]])
        } else {
          value <- value_read(rows$y[[i]])[[1]]
        }
        bars[[length(bars) + 1L]] <- list(
          label = place(rows$x[[i]], read), group = groups[[i]], value = value
        )
      }
    }
    if (length(bars) > max_points) {
      chart$truncated <- TRUE
      bars <- bars[seq_len(max_points)]
    }
    chart$elements <- bars
    chart$x_scale <- scale_kind(axes$scale$x)
    chart$y_scale <- scale_kind(axes$scale$y)
    chart
  }

  pie_chart <- function(built, layers, axes) {
    chart <- frame("pie", axes)
    slices <- do.call(rbind, lapply(layers, function(d) d[, c("group", "ymin", "ymax")]))
    labels <- unlist(lapply(layers, function(d) legend_labels(built, d)))
    total <- sum(slices$ymax - slices$ymin, na.rm = TRUE)
    if (!is.finite(total) || total <= 0) {
      return(chart)
    }
    ranked <- order(slices$group)
    for (i in head(ranked, max_elements)) {
      chart$elements[[length(chart$elements) + 1L]] <- list(
        label = labels[[i]],
        angle = round((slices$ymax[[i]] - slices$ymin[[i]]) / total * 360, 6),
        radius = 1
      )
    }
    if (length(ranked) > max_elements) chart$truncated <- TRUE
    chart
  }

  box_chart <- function(built, layers, axes) {
    chart <- frame("box_and_whisker", axes)
    for (data in layers) {
      if (!nrow(data)) next
      turned <- upright(data)
      rows <- turned$data
      read <- axes$read_aes[[if (turned$flipped) "y" else "x"]]
      value <- axes$read_aes[[if (turned$flipped) "x" else "y"]]
      at <- function(name, i) value(rows[[name]][[i]])[[1]]
      for (i in seq_len(nrow(rows))) {
        if (length(chart$elements) >= max_elements) {
          chart$truncated <- TRUE
          break
        }
        outliers <- if ("outliers" %in% names(rows)) sort(unlist(rows$outliers[[i]])) else numeric()
        chart$elements[[length(chart$elements) + 1L]] <- list(
          label = place(rows$x[[i]], read),
          min = at("ymin", i),
          first_quartile = at("lower", i),
          median = at("middle", i),
          third_quartile = at("upper", i),
          max = at("ymax", i),
          outliers = value(head(outliers, max_points))
        )
      }
    }
    chart
  }

  # One panel as a chart, the kinds tried in the order runner/charts.py tries them.
  panel_chart <- function(built, index, title, budget) {
    layout <- built$layout$layout
    panel <- layout$PANEL[[index]]
    coord <- built$layout$coord
    turned <- inherits(coord, "CoordFlip")
    scale_aes <- list(
      x = built$layout$panel_scales_x[[layout$SCALE_X[[index]]]],
      y = built$layout$panel_scales_y[[layout$SCALE_Y[[index]]]]
    )
    read_aes <- lapply(scale_aes, reader)
    # The chart's x is the horizontal axis, which shows y's aesthetic under coord_flip.
    side <- if (turned) list(x = "y", y = "x") else list(x = "x", y = "y")
    labels <- built$plot$labels
    axes <- list(
      title = title,
      x_label = text(labels[[side$x]]),
      y_label = text(labels[[side$y]]),
      aes = side,
      scale = list(x = scale_aes[[side$x]], y = scale_aes[[side$y]]),
      read = list(x = read_aes[[side$x]], y = read_aes[[side$y]]),
      scale_aes = scale_aes,
      read_aes = read_aes,
      params = built$layout$panel_params[[index]]
    )
    kinds <- vapply(built$plot$layers, layer_kind, "")
    layers <- lapply(built$data, function(d) d[d$PANEL == panel, , drop = FALSE])
    of <- function(kind) layers[kinds == kind]
    has <- function(kind) any(kinds == kind)
    if (inherits(coord, "CoordPolar")) {
      if (identical(coord$theta, "y") && has("bar") && !has("line") && !has("scatter")) {
        return(pie_chart(built, of("bar"), axes))
      }
      return(frame("unknown", axes))
    }
    if (has("box")) {
      return(box_chart(built, of("box"), axes))
    }
    if (has("bar") && !has("scatter")) {
      return(bar_chart(built, of("bar"), axes))
    }
    if (!has("line") && !has("scatter")) {
      return(axes_frame("unknown", axes))
    }
    chart <- axes_frame(if (has("scatter")) "scatter" else "line", axes)
    series <- c(
      unlist(lapply(of("scatter"), function(d) point_series(built, d, axes, budget, FALSE)), FALSE),
      unlist(lapply(of("line"), function(d) point_series(built, d, axes, budget, TRUE)), FALSE)
    )
    if (length(series) > max_elements) {
      series <- series[seq_len(max_elements)]
      chart$truncated <- TRUE
    }
    chart$elements <- unname(series)
    if (any(vapply(series, function(e) isTRUE(e$truncated), TRUE))) chart$truncated <- TRUE
    chart
  }

  facet_title <- function(layout, index) {
    facets <- setdiff(names(layout), c("PANEL", "ROW", "COL", "SCALE_X", "SCALE_Y"))
    text(paste(vapply(facets, function(f) as.character(layout[[f]][[index]]), ""), collapse = ", "))
  }

  # The plot as one chart, or a superchart of one chart per facet panel.
  plot_chart <- function(plot, seed) {
    built <- with_seed(seed, ggplot2::ggplot_build(plot))
    title <- text(built$plot$labels$title)
    layout <- built$layout$layout
    budget <- new_budget()
    if (nrow(layout) == 1L) {
      chart <- panel_chart(built, 1L, title, budget)
    } else {
      shown <- seq_len(min(nrow(layout), max_axes))
      parts <- lapply(shown, function(i) panel_chart(built, i, facet_title(layout, i), budget))
      chart <- list(type = "superchart", title = title, elements = parts)
      if (nrow(layout) > max_axes || any(vapply(parts, function(p) isTRUE(p$truncated), TRUE))) {
        chart$truncated <- TRUE
      }
    }
    if (budget$cut) chart$truncated <- TRUE
    chart
  }

  # The plot is built again with the random numbers its drawing had (geom_jitter's points
  # are where the picture has them), and the session's own are put back after.
  with_seed <- function(seed, expr) {
    here <- globalenv()
    had <- get0(".Random.seed", envir = here, inherits = FALSE)
    if (!is.null(seed)) assign(".Random.seed", seed, envir = here)
    on.exit(
      if (is.null(had)) {
        if (exists(".Random.seed", envir = here, inherits = FALSE)) rm(".Random.seed", envir = here)
      } else {
        assign(".Random.seed", had, envir = here)
      }
    )
    expr
  }

  # ---- publishing -------------------------------------------------------------------------

  # Chart JSON goes into the kernel's message as it is: IRkernel's jsonlite::toJSON would
  # otherwise quote it as a string.
  verbatim <- new.env()
  methods::setOldClass("cellmate_chart_json", where = verbatim)
  methods::setMethod(
    jsonlite:::asJSON, "cellmate_chart_json", function(x, ...) as.character(unclass(x)),
    where = verbatim
  )

  as_json <- function(chart) {
    found <- jsonlite::toJSON(chart, auto_unbox = TRUE, null = "null", na = "null", digits = NA)
    structure(as.character(found), class = "cellmate_chart_json")
  }

  pending <- list()

  builds_upon <- function(before, page) {
    known <- length(before[[1]])
    known > 0 && length(page[[1]]) >= known &&
      identical(page[[1]][seq_len(known)], before[[1]][seq_len(known)])
  }

  executor <- NULL
  for (calling in rev(sys.frames())) {
    found <- get0(".self", envir = calling, inherits = TRUE)
    if (methods::is(found, "Executor")) {
      executor <- found
      break
    }
  }

  request_id <- function() {
    tryCatch(executor$current_request$header$msg_id, error = function(e) NULL)
  }

  remember <- function(plot, newpage, seed) {
    if (grDevices::dev.cur() == 1L) {
      return(invisible())
    }
    snap <- suppressWarnings(grDevices::recordPlot())
    request <- request_id()
    kept <- Filter(function(entry) identical(entry$request, request), pending)
    entry <- list(plot = plot, snap = snap, newpage = newpage, seed = seed, request = request)
    pending <<- utils::tail(c(kept, list(entry)), max_pending)
    invisible()
  }

  # The chart of the plots drawn on this page: the last that started it, and any drawn
  # into it after (print(p, vp = ...)), these as a superchart.
  page_chart <- function(page) {
    matched <- which(vapply(pending, function(entry) builds_upon(entry$snap, page), TRUE))
    if (!length(matched)) {
      return(NULL)
    }
    starts <- matched[vapply(pending[matched], function(entry) isTRUE(entry$newpage), TRUE)]
    used <- matched[matched >= (if (length(starts)) max(starts) else min(matched))]
    entries <- pending[used]
    pending <<- pending[-seq_len(max(used))]
    charts <- lapply(entries, function(entry) plot_chart(entry$plot, entry$seed))
    if (length(charts) == 1L) {
      return(as_json(charts[[1]]))
    }
    chart <- list(type = "superchart", title = NULL, elements = charts)
    if (any(vapply(charts, function(c) isTRUE(c$truncated), TRUE))) chart$truncated <- TRUE
    as_json(chart)
  }

  if (!is.null(executor)) {
    home <- as.environment(executor)
    send_plot <- get("send_plot", envir = home)
    assign("send_plot", function(plotobj) {
      chart <- tryCatch(
        suppressWarnings(suppressMessages(page_chart(plotobj))),
        error = function(e) NULL
      )
      display <- getOption("jupyter.base_display_func")
      if (is.null(chart) || !is.function(display)) {
        return(send_plot(plotobj))
      }
      old <- options(jupyter.base_display_func = function(data, metadata = NULL) {
        data[[chart_mime]] <- chart
        display(data, metadata)
      })
      on.exit(options(old))
      send_plot(plotobj)
    }, envir = home)

    hook <- function(...) {
      space <- asNamespace("ggplot2")
      drawn <- utils::getS3method("print", "ggplot", envir = space)
      wrapped <- function(x, newpage = is.null(vp), vp = NULL, ...) {
        seed <- get0(".Random.seed", envir = globalenv(), inherits = FALSE)
        out <- drawn(x, newpage = newpage, vp = vp, ...)
        tryCatch(remember(x, newpage, seed), error = function(e) NULL)
        invisible(out)
      }
      registerS3method("print", "ggplot", wrapped, envir = space)
      registerS3method("plot", "ggplot", wrapped, envir = space)
    }
    if (isNamespaceLoaded("ggplot2")) {
      hook()
    } else {
      setHook(packageEvent("ggplot2", "onLoad"), hook)
    }
  }
  invisible(NULL)
})
