import {
  Body,
  type CanActivate,
  Controller,
  Get,
  HttpCode,
  Inject,
  NotFoundException,
  Param,
  Post,
  Query,
  Req,
  Res,
  type Type,
  UseGuards,
} from '@nestjs/common';
import { adminAsset, adminPage } from './admin-assets';
import { ADMIN_API, OUTBOX_ADMIN_OPTIONS } from './admin-constants';
import {
  actorOf,
  basePath,
  checkCsrf,
  checkSameOrigin,
  CSRF_HEADER,
  csrfToken,
  secureHeaders,
  type AdminRequest,
  type AdminResponse,
} from './admin-http';
import { eventsQuery, limitFromQuery, mutationBody } from './admin-input';
import type { ResolvedAdminOptions } from './admin-options';
import { OutboxAdminService, type OutboxAdminAction } from './outbox-admin.service';
import { OutboxAdminForbiddenError, OutboxValidationError } from '../errors/outbox.errors';

type Query = Record<string, unknown>;

/** The views of the page: each is the same HTML, which reads its view from the URL. */
const VIEWS = ['', 'events', 'events/:id', 'failures', 'keys', 'audit'];

/**
 * The page and its API on the application's own HTTP adapter, at `path`, behind `guards`: a class
 * made per module, since Nest reads a controller's path and guards from its decorators.
 */
export function createAdminController(path: string, guards: Array<Type<CanActivate> | CanActivate>): Type<unknown> {
  @Controller(path)
  class OutboxAdminController {
    constructor(
      private readonly admin: OutboxAdminService,
      @Inject(OUTBOX_ADMIN_OPTIONS) private readonly options: ResolvedAdminOptions,
    ) {}

    @Get(VIEWS)
    page(@Req() request: AdminRequest, @Res({ passthrough: true }) response: AdminResponse): string {
      secureHeaders(response, 'none');
      response.header('Content-Type', 'text/html; charset=utf-8');
      return adminPage(basePath(request, path));
    }

    @Get('assets/:name')
    asset(@Param('name') name: string, @Res({ passthrough: true }) response: AdminResponse): string {
      const asset = adminAsset(name);
      if (!asset) throw new NotFoundException();
      secureHeaders(response, 'asset');
      response.header('Content-Type', asset.type);
      return asset.body;
    }

    @Get(`${ADMIN_API}/session`)
    session(@Req() request: AdminRequest, @Res({ passthrough: true }) response: AdminResponse) {
      secureHeaders(response, 'none');
      const { readOnly, csrf, refreshMs, stalledAfterMs, actor } = this.options;
      const token = csrf && !readOnly ? csrfToken(request, response, basePath(request, path)) : undefined;
      return {
        version: 1,
        readOnly,
        csrf: token === undefined ? null : { header: CSRF_HEADER, token },
        refreshMs,
        stalledAfterMs,
        actor: actorOf(request, actor),
      };
    }

    @Get(`${ADMIN_API}/overview`)
    overview(@Query() query: Query, @Res({ passthrough: true }) response: AdminResponse) {
      secureHeaders(response, 'none');
      noQuery(query);
      return this.admin.overview();
    }

    @Get(`${ADMIN_API}/events`)
    events(@Query() query: Query, @Res({ passthrough: true }) response: AdminResponse) {
      secureHeaders(response, 'none');
      const { filter, page } = eventsQuery(query);
      return this.admin.events(filter, page);
    }

    @Get(`${ADMIN_API}/events/:id`)
    event(@Param('id') id: string, @Query() query: Query, @Res({ passthrough: true }) response: AdminResponse) {
      secureHeaders(response, 'none');
      noQuery(query);
      return this.admin.event(id);
    }

    @Get(`${ADMIN_API}/failure-groups`)
    failureGroups(@Query() query: Query, @Res({ passthrough: true }) response: AdminResponse) {
      secureHeaders(response, 'none');
      const extra = Object.keys(query).find((name) => name !== 'topic');
      if (extra !== undefined)
        throw new OutboxValidationError('query', `unknown parameter "${extra}" (expected topic)`);
      const topic = query.topic;
      if (topic !== undefined && typeof topic !== 'string') throw new OutboxValidationError('topic', 'give it once');
      return this.admin.failureGroups(topic);
    }

    @Get(`${ADMIN_API}/blocked-keys`)
    blockedKeys(@Query() query: Query, @Res({ passthrough: true }) response: AdminResponse) {
      secureHeaders(response, 'none');
      return this.admin.blockedKeys(limitFromQuery(query, ['limit'], 50, 500));
    }

    @Get(`${ADMIN_API}/audit`)
    audit(@Query() query: Query, @Res({ passthrough: true }) response: AdminResponse) {
      secureHeaders(response, 'none');
      const limit = limitFromQuery(query, ['limit', 'cursor'], 50, 500);
      const cursor = typeof query.cursor === 'string' ? query.cursor : undefined;
      if (query.cursor !== undefined && cursor === undefined) {
        throw new OutboxValidationError('cursor', 'give it once, as text');
      }
      return this.admin.auditTrail(limit, cursor);
    }

    @Post(`${ADMIN_API}/redrive`)
    @HttpCode(200)
    redrive(@Req() request: AdminRequest, @Body() body: unknown, @Res({ passthrough: true }) response: AdminResponse) {
      return this.mutate('redrive', request, body, response, ['dryRun', 'resetAttempts']);
    }

    @Post(`${ADMIN_API}/discard`)
    @HttpCode(200)
    discard(@Req() request: AdminRequest, @Body() body: unknown, @Res({ passthrough: true }) response: AdminResponse) {
      return this.mutate('discard', request, body, response, ['dryRun']);
    }

    @Post(`${ADMIN_API}/deliver-now`)
    @HttpCode(200)
    deliverNow(
      @Req() request: AdminRequest,
      @Body() body: unknown,
      @Res({ passthrough: true }) response: AdminResponse,
    ) {
      return this.mutate('deliverNow', request, body, response, ['dryRun']);
    }

    /** Read-only, then same origin and CSRF, then the body: a refused request reads and writes nothing. */
    private mutate(
      action: OutboxAdminAction,
      request: AdminRequest,
      body: unknown,
      response: AdminResponse,
      options: string[],
    ) {
      secureHeaders(response, 'none');
      if (this.options.readOnly) {
        throw new OutboxAdminForbiddenError('it is read-only (readOnly: true): no event can be changed through it');
      }
      checkSameOrigin(request);
      if (this.options.csrf) checkCsrf(request);
      const given = mutationBody(body, options);
      return this.admin.mutate(action, given.selection, given.options, actorOf(request, this.options.actor));
    }
  }
  if (guards.length > 0) UseGuards(...guards)(OutboxAdminController);
  return OutboxAdminController;
}

function noQuery(query: Query): void {
  const keys = Object.keys(query);
  if (keys.length > 0) throw new OutboxValidationError('query', `unknown parameter "${keys[0]}"`);
}
